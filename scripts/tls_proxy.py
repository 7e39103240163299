#!/usr/bin/env python3
"""TLS in front of a plaintext Kafka broker, for testing dedupd's TLS settings.

  scripts/tls_proxy.py --listen PORT --to HOST:PORT --cert server.pem --key server.key

Why: the test broker, Tansu 0.6.0, takes `--cert` and `--key` but cannot use them (its
command line allows only one of the two, and its listener never wraps connections in TLS;
docs/security.md). So a broker with TLS is made of Tansu advertising this proxy's port and
this proxy terminating TLS (Python's ssl module, i.e. OpenSSL) on 127.0.0.1:PORT. dedupd's
librdkafka does the whole client side for real: the handshake, the chain check against
`ssl.ca.location`, the host name check. Prints `listening` once the port is open; a failed
handshake is logged on stderr and closes only that connection.
"""

import argparse
import asyncio
import ssl
import sys


async def pipe(reader, writer):
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (OSError, ssl.SSLError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()


async def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--listen", type=int, required=True, help="TLS port on 127.0.0.1")
    ap.add_argument("--to", required=True, help="plaintext broker HOST:PORT")
    ap.add_argument("--cert", required=True, help="server certificate chain (PEM)")
    ap.add_argument("--key", required=True, help="server private key (PEM)")
    args = ap.parse_args()
    host, port = args.to.rsplit(":", 1)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(args.cert, args.key)

    async def handle(client_r, client_w):
        try:
            broker_r, broker_w = await asyncio.open_connection(host, int(port))
        except OSError as e:
            print(f"tls_proxy: cannot reach {args.to}: {e}", file=sys.stderr, flush=True)
            client_w.close()
            return
        await asyncio.gather(pipe(client_r, broker_w), pipe(broker_r, client_w))

    server = await asyncio.start_server(handle, "127.0.0.1", args.listen, ssl=ctx)
    print("listening", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
