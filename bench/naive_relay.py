#!/usr/bin/python3
# The naive relay scripts/bench measures outboxd against (issue 17 point 2): what a
# hundred lines of Python on Debian's python3-psycopg2 and python3-confluent-kafka do
# with the same slot and broker. It streams pgoutput (protocol 1) from an existing
# slot, produces every outbox insert at once (linger.ms=0, acks=all, idempotent: the
# same delivery guarantee as outboxd), and confirms a transaction's end once nothing
# it produced is unacknowledged. No dead letters, flow control or reconnects.
#
#   bench/naive_relay.py --pg "host=... dbname=live_1000_naive" --slot slot_live_1000_naive \
#       --brokers 127.0.0.1:9092
#
# Topic = the row's tipo, key = aggregate_id, value = payload, header id. SIGTERM
# flushes the producer, confirms what was acknowledged and exits 0.
import argparse
import select
import signal
import struct
import sys

import psycopg2
import psycopg2.extras
from confluent_kafka import Producer


def cstring(data, at):
    end = data.index(b"\0", at)
    return data[at:end].decode(), end + 1


def decode_relation(data):
    # 'R', relation id (4), namespace, name, replica identity (1), column count (2),
    # per column: flags (1), name, type oid (4), type modifier (4).
    (relid,) = struct.unpack_from(">I", data, 1)
    _, at = cstring(data, 5)
    _, at = cstring(data, at)
    (ncols,) = struct.unpack_from(">H", data, at + 1)
    at += 3
    names = []
    for _ in range(ncols):
        name, at = cstring(data, at + 1)
        names.append(name)
        at += 8
    return relid, names


def decode_insert(data, names):
    # 'I', relation id (4), 'N', column count (2), per column: 'n' (null), 'u'
    # (unchanged TOAST) or 't' then length (4) and the text value.
    at = 8
    row = {}
    for name in names:
        kind = data[at : at + 1]
        at += 1
        if kind == b"t":
            (length,) = struct.unpack_from(">I", data, at)
            row[name] = data[at + 4 : at + 4 + length]
            at += 4 + length
    return row


def main():
    flags = argparse.ArgumentParser(description=__doc__)
    flags.add_argument("--pg", required=True)
    flags.add_argument("--slot", required=True)
    flags.add_argument("--publication", default="outboxd")
    flags.add_argument("--brokers", required=True)
    args = flags.parse_args()

    producer = Producer({"bootstrap.servers": args.brokers, "linger.ms": 0, "acks": "all",
                         "enable.idempotence": True, "socket.nagle.disable": True})
    conn = psycopg2.connect(args.pg, connection_factory=psycopg2.extras.LogicalReplicationConnection)
    cur = conn.cursor()
    cur.start_replication(slot_name=args.slot, decode=False,
                          options={"proto_version": "1", "publication_names": args.publication})
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    relations = {}
    tx_end = 0  # of the last transaction read
    confirmed = 0

    while not stopping:
        msg = cur.read_message()
        if msg is None:
            producer.poll(0)
            if len(producer) == 0 and tx_end != confirmed:
                cur.send_feedback(flush_lsn=tx_end)
                confirmed = tx_end
            select.select([cur], [], [], 0.01)
            continue
        data = msg.payload
        kind = data[:1]
        if kind == b"R":
            relid, names = decode_relation(data)
            relations[relid] = names
        elif kind == b"I":
            row = decode_insert(data, relations[struct.unpack_from(">I", data, 1)[0]])
            producer.produce(row["tipo"].decode(), value=row["payload"], key=row["aggregate_id"],
                             headers={"id": row["id"]})
            producer.poll(0)
        elif kind == b"C":
            # 'C', flags (1), commit LSN (8), end LSN (8), commit time (8).
            (tx_end,) = struct.unpack_from(">Q", data, 10)
    producer.flush(5)
    if len(producer) == 0 and tx_end:
        cur.send_feedback(flush_lsn=tx_end, force=True)
    conn.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
