"""A TCP proxy on 127.0.0.1 that adds latency: each chunk, in each direction, is held
for half of ``--rtt-ms`` before it is passed on (order kept), so every request/response
round trip through it takes ``--rtt-ms`` longer. The target is a Unix socket path
(pgserver's) or host:port.

    python -m offset_journal.local.delay_proxy --listen 6543 \\
        --target /tmp/x/.s.PGSQL.5432 --rtt-ms 50

(bench/delay_proxy.py runs it too.) For tests and benchmarks: the failover tests hold a
streaming standby behind its primary with it (offset_journal.local.standby).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    loop = asyncio.get_running_loop()
    q: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def send() -> None:
        while True:
            due, data = await q.get()
            if not data:
                break
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(data)
            await writer.drain()

    sender = asyncio.create_task(send())
    try:
        while True:
            data = await reader.read(65536)
            q.put_nowait((loop.time() + delay, data))
            if not data:
                break
        await sender
    except (ConnectionError, OSError):
        sender.cancel()
    finally:
        with contextlib.suppress(Exception):
            writer.close()


async def main(args: argparse.Namespace) -> None:
    delay = args.rtt_ms / 2000.0

    async def handle(c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter) -> None:
        try:
            if args.target.startswith("/"):
                s_reader, s_writer = await asyncio.open_unix_connection(args.target)
            else:
                host, port = args.target.rsplit(":", 1)
                s_reader, s_writer = await asyncio.open_connection(host, int(port))
        except OSError:
            c_writer.close()
            return
        await asyncio.gather(_pump(c_reader, s_writer, delay), _pump(s_reader, c_writer, delay))

    server = await asyncio.start_server(handle, "127.0.0.1", args.listen)
    print(f"listening on 127.0.0.1:{args.listen}", flush=True)
    async with server:
        await server.serve_forever()


def run() -> None:
    """The command line (``python -m offset_journal.local.delay_proxy``)."""
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--listen", type=int, required=True)
    p.add_argument("--target", required=True, help="Unix socket path or host:port")
    p.add_argument("--rtt-ms", type=float, default=50.0)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main(p.parse_args()))


if __name__ == "__main__":
    run()
