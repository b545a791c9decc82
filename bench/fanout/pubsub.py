"""How many push messages one Redis delivers to P subscribed ASGI processes (pub/sub only).

    .venv/bin/python -m bench.fanout.pubsub --subscribers 1 4 16 --messages 20000

Each of P subscriber processes holds one subscription, as every ASGI process does
(routing_policies/push.py), and parses each message with json.loads like the hub; one
publisher sends M messages of the size of a real `superseded` push (the most frequent one: one
per device connect) as fast as it can, pipelined. Reported: publish rate, and the time until
every subscriber has every message (the delivered rate, messages × subscribers / s).
Redis db 11, channel `bench:pubsub`: nothing else listens there.
"""

import argparse
import json
import multiprocessing
import time
from multiprocessing.connection import Connection

CHANNEL = "bench:pubsub"
SAMPLE = {"kind": "superseded", "fleet_id": 12, "device_pk": 123456, "connected_at": 1.0e9}


def subscriber(url: str, count: int, done: Connection) -> None:
    import redis

    client = redis.Redis.from_url(url)
    pubsub = client.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(CHANNEL)
    seen = 0
    deadline = time.monotonic() + 120
    while seen < count and time.monotonic() < deadline:
        # None also for the subscribe confirmation, which is skipped: keep reading.
        message = pubsub.get_message(timeout=1.0)
        if message is None:
            continue
        json.loads(message["data"])
        seen += 1
    done.send((seen, time.time()))


def run(url: str, subscribers: int, messages: int) -> dict[str, float]:
    import redis

    context = multiprocessing.get_context("spawn")
    pipes, processes = [], []
    for _ in range(subscribers):
        mine, theirs = context.Pipe()
        process = context.Process(target=subscriber, args=(url, messages, theirs))
        process.start()
        pipes.append(mine)
        processes.append(process)
    try:
        client = redis.Redis.from_url(url)
        deadline = time.monotonic() + 30
        while int(client.pubsub_numsub(CHANNEL)[0][1]) < subscribers:
            if time.monotonic() > deadline:
                raise RuntimeError("the subscribers did not subscribe")
            time.sleep(0.05)
        payload = json.dumps(SAMPLE, separators=(",", ":"))
        started = time.time()
        for first in range(0, messages, 500):
            with client.pipeline(transaction=False) as pipe:
                for _ in range(first, min(messages, first + 500)):
                    pipe.publish(CHANNEL, payload)
                pipe.execute()
        published = time.time()
        results = []
        for pipe_end in pipes:
            if not pipe_end.poll(60):
                raise RuntimeError("a subscriber did not finish within 60 s")
            results.append(pipe_end.recv())
        if any(seen != messages for seen, _ in results):
            raise RuntimeError(f"lost messages: {[seen for seen, _ in results]}")
        delivered = max(at for _, at in results)
        return {
            "subscribers": subscribers,
            "messages": messages,
            "bytes": len(payload),
            "publish_per_s": messages / (published - started),
            "all_delivered_s": delivered - started,
            "deliveries_per_s": messages * subscribers / (delivered - started),
        }
    finally:
        for process in processes:
            process.join(timeout=5)
            if process.is_alive():
                process.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subscribers", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--messages", type=int, default=20000)
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/11")
    args = parser.parse_args()
    print("| subscribers | messages | bytes | PUBLISH/s | all delivered after s | deliveries/s |")
    print("|---|---|---|---|---|---|")
    for count in args.subscribers:
        result = run(args.redis_url, count, args.messages)
        print(
            f"| {count} | {result['messages']:,} | {result['bytes']} "
            f"| {result['publish_per_s']:,.0f} | {result['all_delivered_s']:.2f} "
            f"| {result['deliveries_per_s']:,.0f} |"
        )


if __name__ == "__main__":
    main()
