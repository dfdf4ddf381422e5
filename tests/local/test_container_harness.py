"""The container harness binds loopback only: every container it starts (Docker Hub's
images and the ones scripts/build-images.sh builds) runs on the host network, so each
is told outright to listen on 127.0.0.1 (postgres:16's own default is ``'*'``).

The specs are plain data (the quick tier); the started containers are checked where
they run, in container mode (``docker_only``): their listening sockets, as the kernel
lists them."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest
import sqlalchemy as sa

from offset_journal.journal.db import resolve_url
from offset_journal.local.services import (
    LOCAL_IMAGES,
    OFFICIAL_IMAGES,
    ContainerSpec,
    kafka_container_spec,
    postgres_container_spec,
)

LOOPBACK = "127.0.0.1"
SPECS: dict[str, Callable[[str], ContainerSpec]] = {
    "postgres": lambda image: postgres_container_spec(image, 15432),
    "kafka": lambda image: kafka_container_spec(image, 19092, 19093, "b2Zmc2V0LWpvdXJuYWwtMQ"),
}


def postgres_listen_addresses(command: tuple[str, ...]) -> str | None:
    """What ``postgres`` run with ``command`` listens on (the last ``-c
    listen_addresses=`` or ``-h`` wins); None: the image's default."""
    args = list(command[1:] if command[:1] == ("postgres",) else command)
    found = None
    for flag, value in itertools.pairwise(args):
        if flag == "-c" and value.startswith("listen_addresses="):
            found = value.split("=", 1)[1].strip("'\"")
        elif flag == "-h":
            found = value
    return found


def kafka_hosts(env: dict[str, str]) -> list[str | None]:
    """Every host the Kafka container is told to listen on or advertise, in either
    image's terms (None where one is left to the image's default)."""
    hosts: list[str | None] = [env.get("KAFKA_HOST")]  # the image built here
    for key in ("KAFKA_LISTENERS", "KAFKA_ADVERTISED_LISTENERS"):  # apache/kafka
        listeners = env[key].split(",") if key in env else [None]
        hosts += [x and x.split("://", 1)[1].rsplit(":", 1)[0] for x in listeners]
    voters = env.get("KAFKA_CONTROLLER_QUORUM_VOTERS")
    hosts += [v.split("@", 1)[1].rsplit(":", 1)[0] for v in voters.split(",")] if voters \
        else [None]
    return hosts


@pytest.mark.parametrize("service,image", [(s, i) for s in SPECS
                                           for i in (OFFICIAL_IMAGES[s], LOCAL_IMAGES[s])])
def test_every_container_the_harness_builds_binds_loopback_only(service, image):
    spec = SPECS[service](image)
    assert spec.image == image and spec.network_mode == "host"
    if service == "postgres":
        assert postgres_listen_addresses(spec.command) == LOOPBACK
    else:
        assert set(kafka_hosts(spec.env)) == {LOOPBACK}


def test_the_checks_see_an_open_address():
    """The helpers above read what they claim: an unset or wildcard address shows."""
    assert postgres_listen_addresses(()) is None
    assert postgres_listen_addresses(("postgres", "-c", "listen_addresses=127.0.0.1",
                                      "-c", "listen_addresses='*'")) == "*"
    assert postgres_listen_addresses(("postgres", "-h", "0.0.0.0")) == "0.0.0.0"
    open_kafka = {"KAFKA_LISTENERS": "PLAINTEXT://0.0.0.0:9092",
                  "KAFKA_CONTROLLER_QUORUM_VOTERS": "1@127.0.0.1:9093"}
    assert set(kafka_hosts(open_kafka)) == {None, "0.0.0.0", LOOPBACK}


def _listening(port: int) -> set[str]:
    """The local addresses of the TCP sockets listening on ``port`` (/proc/net/tcp and
    tcp6; the containers share this host's network namespace)."""
    import ipaddress

    found = set()
    for table, width in (("/proc/net/tcp", 4), ("/proc/net/tcp6", 16)):
        with open(table, encoding="ascii") as rows:
            next(rows)
            for row in rows:
                local, state = row.split()[1], row.split()[3]
                address, hexport = local.split(":")
                if state != "0A" or int(hexport, 16) != port:  # 0A: LISTEN
                    continue
                raw = bytes.fromhex(address)
                # the kernel prints each 32-bit word in host (little-endian) order
                words = b"".join(raw[i:i + 4][::-1] for i in range(0, width, 4))
                ip = ipaddress.ip_address(words)
                # Java binds an IPv4 address as IPv4-mapped IPv6 (::ffff:127.0.0.1)
                mapped = getattr(ip, "ipv4_mapped", None)
                found.add(str(mapped or ip))
    return found


@pytest.mark.docker_only
def test_started_containers_listen_on_loopback_only(journal_server, kafka_cluster):
    assert (journal_server.kind, kafka_cluster.kind) == ("testcontainers", "testcontainers")
    url = sa.engine.make_url(journal_server.admin_url)
    engine = sa.create_engine(resolve_url(journal_server.admin_url), poolclass=sa.pool.NullPool)
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SHOW listen_addresses").scalar_one() == LOOPBACK
    engine.dispose()
    env = kafka_cluster.container.env
    ports = {"postgres": url.port, "kafka": int(env["KAFKA_PORT"]),
             "kafka controller": int(env["KAFKA_CONTROLLER_PORT"])}
    assert {name: _listening(port) for name, port in ports.items()} == \
        {name: {LOOPBACK} for name in ports}
