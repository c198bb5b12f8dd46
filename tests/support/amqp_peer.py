#!/usr/bin/env python3
"""An independent AMQP client (pika) for the RabbitMQ tests (tests/amqp, tests/inbox).

  amqp_peer.py bind URL EXCHANGE QUEUE BINDING_KEY   durable topic exchange, queue, binding
  amqp_peer.py delete URL EXCHANGE QUEUE             removes both
  amqp_peer.py hash URL EXCHANGE HASH_EXCHANGE QUEUE N
      the competing-consumers topology of docs/usage.md "RabbitMQ instead of
      Kafka": EXCHANGE (outboxd's durable topic exchange) bound with "#" to
      HASH_EXCHANGE, an x-consistent-hash exchange hashing the aggregate_id header,
      and queues QUEUE0..QUEUE<N-1> bound to it with weight 1 each
  amqp_peer.py drain URL QUEUE                       every message, oldest first, one line each:
      routing_key \t message_id \t type \t content_type \t timestamp \t delivery_mode \t
      headers (name=value;... sorted) \t body
"""
import sys

import pika


def connect(url):
    params = pika.URLParameters(url)
    params.connection_attempts = 3
    params.retry_delay = 1
    return pika.BlockingConnection(params)


def text(value):
    if value is None:
        return ""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def bind(url, exchange, queue, key):
    conn = connect(url)
    ch = conn.channel()
    ch.exchange_declare(exchange=exchange, exchange_type="topic", durable=True)
    ch.queue_declare(queue=queue, durable=True)
    ch.queue_bind(queue=queue, exchange=exchange, routing_key=key)
    conn.close()


def delete(url, exchange, queue):
    conn = connect(url)
    ch = conn.channel()
    ch.queue_delete(queue=queue)
    ch.exchange_delete(exchange=exchange)
    conn.close()


def hash_topology(url, exchange, hash_exchange, queue, n):
    conn = connect(url)
    ch = conn.channel()
    ch.exchange_declare(exchange=exchange, exchange_type="topic", durable=True)
    ch.exchange_declare(exchange=hash_exchange, exchange_type="x-consistent-hash", durable=True,
                        arguments={"hash-header": "aggregate_id"})
    ch.exchange_bind(destination=hash_exchange, source=exchange, routing_key="#")
    for i in range(int(n)):
        ch.queue_declare(queue=f"{queue}{i}", durable=True)
        ch.queue_bind(queue=f"{queue}{i}", exchange=hash_exchange, routing_key="1")
    conn.close()


def drain(url, queue):
    conn = connect(url)
    ch = conn.channel()
    # A consumer (the broker pushes) rather than one basic.get round trip each. Manual
    # acks: the broker may push more than `count` while messages keep arriving; those
    # are not acked, so they go back to the queue, in their place, when we close.
    count = ch.queue_declare(queue=queue, passive=True).method.message_count
    taken = 0
    last_tag = None
    for method, props, body in [] if count == 0 else ch.consume(queue, auto_ack=False, inactivity_timeout=10):
        if method is None:
            break
        last_tag = method.delivery_tag
        headers = ";".join(f"{k}={text(v)}" for k, v in sorted((props.headers or {}).items()))
        fields = [method.routing_key, text(props.message_id), text(props.type),
                  text(props.content_type), text(props.timestamp), text(props.delivery_mode),
                  headers, body.decode("utf-8", "replace")]
        print("\t".join(fields))
        taken += 1
        if taken == count:
            break
    if last_tag is not None:
        ch.basic_ack(delivery_tag=last_tag, multiple=True)
    if count > 0:
        ch.cancel()
    conn.close()


def main():
    cmd = sys.argv[1]
    if cmd == "bind":
        bind(*sys.argv[2:6])
    elif cmd == "delete":
        delete(*sys.argv[2:5])
    elif cmd == "hash":
        hash_topology(*sys.argv[2:7])
    elif cmd == "drain":
        drain(*sys.argv[2:4])
    else:
        sys.exit(f"amqp_peer.py: unknown command {cmd}")


if __name__ == "__main__":
    main()
