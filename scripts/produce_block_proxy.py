#!/usr/bin/env python3
"""A Kafka proxy that can make one topic unwritable, for scripts/faults.py (`unwritable`).

  scripts/produce_block_proxy.py --listen PORT --to HOST:PORT --topic NAME

Forwards every connection to the broker unchanged. After SIGUSR1 it holds back every Produce
request that names --topic (and everything the same connection sends after it) until SIGUSR2:
the broker never sees those requests, so their records are neither stored nor acknowledged,
while fetches, metadata, group and offset requests, and produce requests for other topics go
through. To the producer that is a partition leader that does not answer: its requests time
out (`request.timeout.ms`), it reconnects and retries until `message.timeout.ms`. A held
request of a connection the client has closed is dropped with it, never sent late.

Why a proxy: the test broker (Tansu 0.6.0) has no per-topic write quota, no read-only topics
and no way to take one partition's leader away (docs/reliability.md). The broker must
advertise this proxy's port (`--advertised-listener-url`), so that every connection passes
through it. Prints `listening` once the port is open; logs blocking changes on stderr.
"""

import argparse
import asyncio
import signal
import struct
import sys

PRODUCE = 0


async def frames(reader):
    """Kafka request frames (4-byte big-endian size, then the request) as bytes."""
    while True:
        head = await reader.readexactly(4)
        (size,) = struct.unpack(">i", head)
        yield head + await reader.readexactly(size)


async def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--listen", type=int, required=True, help="port on 127.0.0.1")
    ap.add_argument("--to", required=True, help="broker HOST:PORT")
    ap.add_argument("--topic", required=True, help="the topic whose produce requests are held while blocked")
    args = ap.parse_args()
    host, port = args.to.rsplit(":", 1)
    # Produce requests carry the topic name as a (compact) string: finding its bytes is
    # enough here (the faults runner's topic names are unique and in no payload).
    needle = args.topic.encode()
    writable = asyncio.Event()
    writable.set()
    held = [0]

    def block(on):
        if on:
            writable.clear()
        else:
            writable.set()
        print(f"produce_block_proxy: {args.topic} {'blocked' if on else 'writable'} "
              f"({held[0]} requests held so far)", file=sys.stderr, flush=True)

    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGUSR1, block, True)
    loop.add_signal_handler(signal.SIGUSR2, block, False)

    async def upstream(client_r, broker_w):
        async for frame in frames(client_r):
            api_key = struct.unpack(">h", frame[4:6])[0]
            if api_key == PRODUCE and needle in frame and not writable.is_set():
                held[0] += 1
                await writable.wait()
            broker_w.write(frame)
            await broker_w.drain()

    async def downstream(broker_r, client_w):
        while data := await broker_r.read(65536):
            client_w.write(data)
            await client_w.drain()

    async def handle(client_r, client_w):
        try:
            broker_r, broker_w = await asyncio.open_connection(host, int(port))
        except OSError:
            client_w.close()
            return
        tasks = [asyncio.ensure_future(upstream(client_r, broker_w)),
                 asyncio.ensure_future(downstream(broker_r, client_w))]
        # Either side closing ends the pair; a held request dies with its connection.
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        broker_w.close()
        client_w.close()

    server = await asyncio.start_server(handle, "127.0.0.1", args.listen)
    print("listening", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
