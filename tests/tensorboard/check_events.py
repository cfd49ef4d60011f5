#!/usr/bin/python3
"""A second, independent reader of mtrain's TensorBoard event files.

Run with Debian's python3 (python3-protobuf, python3-crc32c):
    check_events.py <tensorboard_dir> <logging.jsonl> <expectations.json>

It shares no code with mtrain: the TFRecord framing is parsed here, both
masked CRC-32Cs are checked with the crc32c module, and the Event messages are
decoded by python-protobuf from a descriptor built below from TensorBoard's
field numbers (tensorboard/compat/proto/event.proto, summary.proto). The
scalars are then checked against logging.jsonl of the same run. Prints what
it checked and exits 1 at the first mismatch.
"""
import json
import math
import os
import struct
import sys

import crc32c
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

F = descriptor_pb2.FieldDescriptorProto


def event_class():
    fdp = descriptor_pb2.FileDescriptorProto(name="check_events.proto", package="check", syntax="proto3")
    summary = fdp.message_type.add(name="Summary")
    value = summary.nested_type.add(name="Value")
    value.oneof_decl.add(name="value")
    value.field.add(name="tag", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    value.field.add(name="simple_value", number=2, type=F.TYPE_FLOAT, label=F.LABEL_OPTIONAL, oneof_index=0)
    summary.field.add(name="value", number=1, type=F.TYPE_MESSAGE, label=F.LABEL_REPEATED,
                      type_name=".check.Summary.Value")
    event = fdp.message_type.add(name="Event")
    event.oneof_decl.add(name="what")
    event.field.add(name="wall_time", number=1, type=F.TYPE_DOUBLE, label=F.LABEL_OPTIONAL)
    event.field.add(name="step", number=2, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
    event.field.add(name="file_version", number=3, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL, oneof_index=0)
    event.field.add(name="summary", number=5, type=F.TYPE_MESSAGE, label=F.LABEL_OPTIONAL,
                    type_name=".check.Summary", oneof_index=0)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return message_factory.MessageFactory(pool).GetPrototype(pool.FindMessageTypeByName("check.Event"))


def masked(crc):
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def fail(msg):
    print("check_events: FAIL: " + msg)
    sys.exit(1)


def read_file(path, Event):
    data = open(path, "rb").read()
    events, pos = [], 0
    while pos < len(data):
        if len(data) - pos < 12:
            break  # cut record: a killed writer
        head = data[pos:pos + 8]
        (length,) = struct.unpack("<Q", head)
        (length_crc,) = struct.unpack("<I", data[pos + 8:pos + 12])
        if length_crc != masked(crc32c.crc32c(head)):
            fail("%s: length CRC mismatch at byte %d" % (path, pos))
        if len(data) - pos - 12 < length + 4:
            break
        body = data[pos + 12:pos + 12 + length]
        (body_crc,) = struct.unpack("<I", data[pos + 12 + length:pos + 16 + length])
        if body_crc != masked(crc32c.crc32c(body)):
            fail("%s: data CRC mismatch at byte %d" % (path, pos))
        ev = Event()
        ev.ParseFromString(body)
        events.append(ev)
        pos += 16 + length
    return events


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def main():
    tb_dir, jsonl, expect_path = sys.argv[1:4]
    expect = json.load(open(expect_path))
    Event = event_class()
    files = [os.path.join(tb_dir, n) for n in os.listdir(tb_dir) if n.startswith("events.out.tfevents.")]
    per_file = [read_file(p, Event) for p in files]
    for p, evs in zip(files, per_file):
        if not evs or evs[0].WhichOneof("what") != "file_version" or evs[0].file_version != "brain.Event:2":
            fail("%s does not start with file_version brain.Event:2" % p)
    if len(files) != expect["files"]:
        fail("%d event files, expected %d" % (len(files), expect["files"]))
    per_file.sort(key=lambda evs: evs[0].wall_time)
    curves = {}  # tag -> [(step, value)] in file order
    for evs in per_file:
        for ev in evs[1:]:
            for v in ev.summary.value:
                curves.setdefault(v.tag, []).append((ev.step, v.simple_value))
    rows = [json.loads(line) for line in open(jsonl) if line.strip()]
    train = [r for r in rows if "loss" in r]
    evals = [r for r in rows if "eval_loss" in r]
    its = [int(r["iteration"].split("/")[0]) for r in train]
    if [s for s, _ in curves.get("lm loss", [])] != its:
        fail("lm loss steps %s, logging.jsonl iterations %s" % ([s for s, _ in curves.get("lm loss", [])], its))
    checked = 0
    for tag, key in expect["per_iteration"].items():
        got = curves.get(tag, [])
        want = [(it, f32(r[key])) for it, r in zip(its, train)]
        if got != want:
            fail("%s: %s, logging.jsonl %s: %s" % (tag, got, key, want))
        vs = curves.get(tag + " vs samples", [])
        want_vs = [(r["consumed_samples"], f32(r[key])) for r in train]
        if vs != want_vs:
            fail("%s vs samples: %s, expected %s" % (tag, vs, want_vs))
        checked += 2 * len(got)
    got = curves.get("iteration-time", [])
    want = [(it, r["elapsed_time_per_iteration_ms"] / 1000.0) for it, r in zip(its, train)]
    if [s for s, _ in got] != [s for s, _ in want] or any(
            abs(g - w) > 4 * 2.0 ** -24 * w for (_, g), (_, w) in zip(got, want)):
        fail("iteration-time %s, expected %s" % (got, want))
    checked += len(got)
    got = curves.get("lm loss validation", [])
    want = [(r["iteration"], f32(r["eval_loss"])) for r in evals]
    if got != want:
        fail("lm loss validation %s, expected %s" % (got, want))
    ppl = curves.get("lm loss validation ppl", [])
    want_ppl = [(r["iteration"], f32(math.exp(min(20.0, r["eval_loss"])))) for r in evals]
    if ppl != want_ppl:
        fail("lm loss validation ppl %s, expected %s" % (ppl, want_ppl))
    checked += len(got) + len(ppl)
    print("check_events: ok: %d files, %d tags, %d values checked against %s" % (len(files), len(curves), checked,
                                                                                 jsonl))


if __name__ == "__main__":
    main()
