#!/bin/sh
# Write server.properties from the environment, format the storage on first start, run.
set -eu
: "${KAFKA_PORT:=9092}" "${KAFKA_CONTROLLER_PORT:=9093}" "${KAFKA_HOST:=127.0.0.1}"
: "${KAFKA_CLUSTER_ID:=b2Zmc2V0LWpvdXJuYWwtMQ}" "${KAFKA_DATA:=/var/lib/kafka}"
: "${KAFKA_HEAP:=512m}" "${KAFKA_NUM_PARTITIONS:=1}" "${KAFKA_AUTO_CREATE_TOPICS:=false}"
mkdir -p "$KAFKA_DATA"
CP="/opt/kafka/libs/*"
cat > "$KAFKA_DATA/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@$KAFKA_HOST:$KAFKA_CONTROLLER_PORT
listeners=PLAINTEXT://$KAFKA_HOST:$KAFKA_PORT,CONTROLLER://$KAFKA_HOST:$KAFKA_CONTROLLER_PORT
advertised.listeners=PLAINTEXT://$KAFKA_HOST:$KAFKA_PORT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$KAFKA_DATA/logs
num.partitions=$KAFKA_NUM_PARTITIONS
auto.create.topics.enable=$KAFKA_AUTO_CREATE_TOPICS
delete.topic.enable=true
group.initial.rebalance.delay.ms=0
log.retention.check.interval.ms=1000
log.initial.task.delay.ms=0
log.retention.ms=-1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
log.segment.delete.delay.ms=0
file.delete.delay.ms=0
PROPS
cat > "$KAFKA_DATA/log4j2.xml" <<'XML'
<?xml version="1.0" encoding="UTF-8"?>
<Configuration status="WARN">
  <Appenders><Console name="out" target="SYSTEM_OUT"><PatternLayout pattern="[%d] %p %m (%c)%n"/></Console></Appenders>
  <Loggers><Root level="WARN"><AppenderRef ref="out"/></Root>
    <Logger name="kafka.server.KafkaRaftServer" level="INFO"/></Loggers>
</Configuration>
XML
LOG="-Dlog4j2.configurationFile=$KAFKA_DATA/log4j2.xml"
if [ ! -f "$KAFKA_DATA/logs/meta.properties" ]; then
    java -Xmx256m "$LOG" -cp "$CP" kafka.tools.StorageTool format \
        -t "$KAFKA_CLUSTER_ID" -c "$KAFKA_DATA/server.properties"
fi
exec java "-Xmx$KAFKA_HEAP" "-Xms$KAFKA_HEAP" -XX:+UseG1GC "$LOG" -cp "$CP" \
    kafka.Kafka "$KAFKA_DATA/server.properties"
