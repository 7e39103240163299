#!/usr/bin/env python3
"""A Kafka proxy that can make one topic unwritable, make its writes lag, or skip a record
batch in a consumer's fetch, for scripts/faults.py (`unwritable`) and the tests
(tests/replay_bounds.rs, tests/memory.rs, tests/event_time.rs).

  scripts/produce_block_proxy.py --listen PORT --to HOST:PORT --topic NAME [--lag] [--slow-fetch B]
  scripts/produce_block_proxy.py --listen PORT --to HOST:PORT --topic - --skip-batch CLIENT_ID_SUFFIX
  scripts/produce_block_proxy.py --listen PORT --to HOST:PORT --topic - --fail-produce CLIENT_ID_SUFFIX

Forwards every connection to the broker unchanged until SIGUSR1; SIGUSR2 ends what SIGUSR1
started. Two ways to hold back the Produce requests that name --topic:

- block (the default): such a request and everything the same connection sends after it are
  held until SIGUSR2. The broker never sees them, so their records are neither stored nor
  acknowledged, while other connections (fetches, metadata, group and offset requests) go on.
  To the producer that is a partition leader that does not answer: its requests time out
  (`request.timeout.ms`), it reconnects and retries until `message.timeout.ms`.
- --lag: only the Produce requests naming --topic are set aside; the connection's later
  requests, Produce requests for other topics included, go through and are answered. At
  SIGUSR2 the held ones are sent, in the order they came, before anything the connection sends
  after. Their answers arrive after those of later requests: librdkafka matches an answer to its
  request by correlation id (`rd_kafka_waitresp_find`), and keeps order only within a partition
  (a Produce request names one partition, and all of a partition's are held). So one
  connection's writes to --topic are acknowledged behind its writes to the other topics, as
  when partitions have different leaders.

--skip-batch S: at SIGUSR1 the next Fetch answer to a client whose client.id ends in S that
holds two or more record batches of a partition loses the first of them (once; SIGUSR2
disarms it), as the test broker answers a reader standing at a batch it has numbered but not
stored yet (docs/dev/broker.md, finding 12): the client's next fetch starts after the batch it
was given, and the skipped one is never fetched again unless the client asks for it.

--fail-produce S: at SIGUSR1 the next Produce answer to a client whose client.id ends in S says
OUT_OF_ORDER_SEQUENCE_NUMBER for its first partition (once), as the test broker answered a
router under load (finding 12): fatal to an idempotent producer, though the broker stored the
records.

--slow-fetch B passes the broker's answers on at B bytes per second per connection, in small
pieces, from the start: a large read (a restore's snapshot) then takes seconds while records keep
arriving, as from a slow broker (tests/restore_reads.rs).

In both modes a held request of a connection the client has closed is dropped with it, never
sent late (logged: `dropped N held requests`). Logs on stderr, flushed: every change of mode
with the number of requests held so far.

Why a proxy: the test broker (Nisshi) has no per-topic write quota, no read-only topics and no
way to take one partition's leader away, and one broker serves every partition over one
connection per client, in order. The broker must advertise this proxy's port
(`--advertised-listener-url`), so that every connection passes through it. Prints `listening`
once the port is open.
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


class Cursor:
    """Reads the Kafka protocol's primitive types from a request frame."""

    def __init__(self, data, pos):
        self.data, self.pos = data, pos

    def fixed(self, fmt):
        (v,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return v

    def uvarint(self):
        shift = value = 0
        while True:
            b = self.data[self.pos]
            self.pos += 1
            value |= (b & 0x7F) << shift
            if b < 0x80:
                return value
            shift += 7

    def skip(self, n):
        if n > 0:
            self.pos += n
        if self.pos > len(self.data):
            raise ValueError("past the end of the frame")

    def string(self, compact):
        n = self.uvarint() - 1 if compact else self.fixed(">h")
        start = self.pos
        self.skip(n)
        return None if n < 0 else bytes(self.data[start:self.pos])

    def bytes_len(self, compact):
        return self.uvarint() - 1 if compact else self.fixed(">i")

    def array_len(self, compact):
        return self.uvarint() - 1 if compact else self.fixed(">i")

    def tags(self):
        for _ in range(self.uvarint()):
            self.uvarint()
            self.skip(self.uvarint())


def produce_topics(frame):
    """The topic names of a Produce request frame (versions 3 to 12; flexible from 9), or None
    if it cannot be read (an older version, or a frame cut short)."""
    try:
        c = Cursor(frame, 4)
        _api_key, version, _corr = c.fixed(">h"), c.fixed(">h"), c.fixed(">i")
        if not 3 <= version <= 12:
            return None
        flexible = version >= 9
        c.string(False)  # client id: a plain nullable string in every header version
        if flexible:
            c.tags()
        c.string(flexible)  # transactional id
        c.skip(2 + 4)  # acks, timeout
        names = []
        for _ in range(c.array_len(flexible)):
            names.append(c.string(flexible))
            for _ in range(c.array_len(flexible)):
                c.skip(4)  # partition index
                c.skip(c.bytes_len(flexible))  # records
                if flexible:
                    c.tags()
            if flexible:
                c.tags()
        return names
    except (struct.error, IndexError, ValueError):
        return None


FETCH = 1


def request_header(frame):
    """(api key, version, correlation id, client id) of a request frame."""
    c = Cursor(frame, 4)
    api_key, version, corr = c.fixed(">h"), c.fixed(">h"), c.fixed(">i")
    return api_key, version, corr, c.string(False) or b""


def without_first_batch(frame, version):
    """A Fetch response frame (versions 4 to 17) with the first record batch of the first
    partition holding two or more batches taken out, as a broker that skipped it would answer;
    (frame, partition, base offset of the batch) or None if no partition holds two."""
    flexible = version >= 12
    c = Cursor(frame, 4)
    c.skip(4)  # correlation id
    if flexible:
        c.tags()
    c.skip(4 + 2 + 4)  # throttle time, error code, session id (v7+)
    for _ in range(c.array_len(flexible)):
        if version >= 13:
            c.skip(16)  # topic id
        else:
            c.string(flexible)
        for _ in range(c.array_len(flexible)):
            partition = c.fixed(">i")
            c.skip(2 + 8 + 8 + 8)  # error code, high watermark, last stable offset, log start offset
            for _ in range(max(0, c.array_len(flexible))):  # aborted transactions
                c.skip(16)
                if flexible:
                    c.tags()
            if version >= 11:
                c.skip(4)  # preferred read replica
            length_at = c.pos
            n = c.bytes_len(flexible)
            start = c.pos
            c.skip(n)
            if n > 12:
                (base,) = struct.unpack_from(">q", frame, start)
                (batch,) = struct.unpack_from(">i", frame, start + 8)
                first = 12 + batch
                if first < n:
                    rest = bytes(frame[start + first:start + n])
                    length = uvarint_bytes(len(rest) + 1) if flexible else struct.pack(">i", len(rest))
                    body = bytes(frame[4:length_at]) + length + rest + bytes(frame[start + n:])
                    return struct.pack(">i", len(body)) + body, partition, base
            if flexible:
                c.tags()
        if flexible:
            c.tags()
    return None


OUT_OF_ORDER_SEQUENCE_NUMBER = 45


def with_produce_error(frame, version, code):
    """A Produce response frame (versions 3 to 12; flexible from 9) whose first partition answer
    carries error `code`, or None if it cannot be read."""
    flexible = version >= 9
    try:
        c = Cursor(frame, 4)
        c.skip(4)  # correlation id
        if flexible:
            c.tags()
        if c.array_len(flexible) < 1:
            return None
        c.string(flexible)  # topic name
        if c.array_len(flexible) < 1:
            return None
        c.skip(4)  # partition index
        out = bytearray(frame)
        struct.pack_into(">h", out, c.pos, code)
        return bytes(out)
    except (struct.error, IndexError, ValueError):
        return None


def uvarint_bytes(v):
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def log(*a):
    print("produce_block_proxy:", *a, file=sys.stderr, flush=True)


async def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--listen", type=int, required=True, help="port on 127.0.0.1")
    ap.add_argument("--to", required=True, help="broker HOST:PORT")
    ap.add_argument("--topic", required=True, help="the topic whose produce requests are held")
    ap.add_argument("--lag", action="store_true",
                    help="hold only the produce requests naming --topic, not the connection's later requests")
    ap.add_argument("--skip-batch", metavar="CLIENT_ID_SUFFIX",
                    help="at SIGUSR1, take the first record batch out of the next Fetch answer to a client "
                         "whose client.id ends so that holds two or more (once), as a broker that skips one")
    ap.add_argument("--fail-produce", metavar="CLIENT_ID_SUFFIX",
                    help="at SIGUSR1, answer the next Produce request of a client whose client.id ends so "
                         "with OUT_OF_ORDER_SEQUENCE_NUMBER (once; the broker has stored its records)")
    ap.add_argument("--slow-fetch", type=int, metavar="BYTES_PER_S",
                    help="pass the broker's answers on at this many bytes per second per connection")
    args = ap.parse_args()
    host, port = args.to.rsplit(":", 1)
    topic = args.topic.encode()
    mode = ("skip-batch" if args.skip_batch else "fail-produce" if args.fail_produce
            else "lag" if args.lag else "block")
    skip_armed = [False]
    free = asyncio.Event()  # set: nothing is held back
    free.set()
    held_total = [0]
    connections = set()  # the live connections' Conn objects

    def names_topic(frame):
        if struct.unpack_from(">h", frame, 4)[0] != PRODUCE:
            return False
        names = produce_topics(frame)
        # A frame that cannot be read is held if the name's bytes are in it (the runners'
        # topic names are unique and in no payload).
        return topic in names if names is not None else topic in frame

    class Conn:
        def __init__(self, client_r, client_w, broker_w):
            self.client_r, self.client_w, self.broker_w = client_r, client_w, broker_w
            self.held = []  # frames held back, in arrival order
            self.fetches = {}  # --skip-batch, --fail-produce: correlation id -> (api key, version)

        def closed(self):
            return (self.client_r.at_eof() or self.client_r.exception() is not None
                    or self.client_w.is_closing() or self.broker_w.is_closing())

        def release(self):
            """Sends the held frames now, in order, before anything later of this connection
            (this runs on the event loop, as the forwarding does)."""
            if not self.held:
                return 0
            if self.closed():
                self.drop()
                return 0
            n = len(self.held)
            for frame in self.held:
                self.broker_w.write(frame)
            self.held.clear()
            return n

        def drop(self):
            if self.held:
                log(f"dropped {len(self.held)} held requests (the client closed its connection)")
                self.held.clear()

    def hold(on):
        if args.skip_batch or args.fail_produce:
            skip_armed[0] = on
            log(f"{mode} {'armed' if on else 'disarmed'}")
            return
        if on:
            free.clear()
            log(f"{args.topic} {'lagging' if args.lag else 'blocked'} ({held_total[0]} requests held so far)")
            return
        released = sum(c.release() for c in list(connections))
        free.set()
        log(f"{args.topic} writable ({held_total[0]} requests held so far, {released} requests released now)")

    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGUSR1, hold, True)
    loop.add_signal_handler(signal.SIGUSR2, hold, False)

    async def upstream(conn, client_r, broker_w):
        # Reads on while holding, so that a client closing its connection is seen at once.
        async for frame in frames(client_r):
            if args.skip_batch or args.fail_produce:
                api_key, version, corr, client_id = request_header(frame)
                if api_key == FETCH and args.skip_batch and client_id.endswith(args.skip_batch.encode()):
                    conn.fetches[corr] = (FETCH, version)
                if api_key == PRODUCE and args.fail_produce and client_id.endswith(args.fail_produce.encode()):
                    conn.fetches[corr] = (PRODUCE, version)
            if not free.is_set() and names_topic(frame):
                held_total[0] += 1
                conn.held.append(frame)
            elif conn.held and not args.lag:
                conn.held.append(frame)  # block: everything after a held request waits too
            else:
                broker_w.write(frame)
                await broker_w.drain()

    async def skipping_downstream(conn, broker_r, client_w):
        async for frame in frames(broker_r):
            (corr,) = struct.unpack_from(">i", frame, 4)
            api_key, version = conn.fetches.pop(corr, (None, None))
            if api_key == FETCH and skip_armed[0] and version >= 4:
                cut = without_first_batch(frame, version)
                if cut is not None:
                    frame, partition, base = cut
                    skip_armed[0] = False
                    log(f"skipped the batch at offset {base} of partition {partition}")
            elif api_key == PRODUCE and skip_armed[0] and 3 <= version <= 12:
                failed = with_produce_error(frame, version, OUT_OF_ORDER_SEQUENCE_NUMBER)
                if failed is not None:
                    frame = failed
                    skip_armed[0] = False
                    log("answered a produce request with OUT_OF_ORDER_SEQUENCE_NUMBER")
            client_w.write(frame)
            await client_w.drain()

    async def downstream(broker_r, client_w):
        piece = 65536 if not args.slow_fetch else max(1, min(65536, args.slow_fetch // 20))
        while data := await broker_r.read(piece):
            client_w.write(data)
            await client_w.drain()
            if args.slow_fetch:
                await asyncio.sleep(len(data) / args.slow_fetch)

    async def handle(client_r, client_w):
        try:
            broker_r, broker_w = await asyncio.open_connection(host, int(port))
        except OSError:
            client_w.close()
            return
        conn = Conn(client_r, client_w, broker_w)
        connections.add(conn)
        tasks = [asyncio.ensure_future(upstream(conn, client_r, broker_w)),
                 asyncio.ensure_future(skipping_downstream(conn, broker_r, client_w)
                                       if args.skip_batch or args.fail_produce else downstream(broker_r, client_w))]
        # Either side closing ends the pair; a held request dies with its connection.
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        connections.discard(conn)
        conn.drop()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        broker_w.close()
        client_w.close()

    server = await asyncio.start_server(handle, "127.0.0.1", args.listen)
    log(f"mode {mode}, topic {args.topic}, to {args.to}, slow fetch {args.slow_fetch or 'off'}")
    print("listening", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
