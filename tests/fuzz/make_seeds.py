#!/usr/bin/python3
"""Writes the seed corpus of every fuzz target into tests/fuzz/corpus/<target>/seed-*.

Seeds are small valid inputs (and a few near-misses) from which libFuzzer mutates; they are
committed, so this script runs only when a format changes. Files named crash-* (regressions) are
never touched. Needs Debian's python3-pil for the images.
"""
import io
import json
import os
import struct
import sys
import tarfile

from PIL import Image

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def put(target, name, data):
    folder = os.path.join(ROOT, target)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "seed-" + name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


# --- the rendezvous store's messages (store_protocol.h)
def message(code, *fields):
    out = bytes([code]) + struct.pack("<I", len(fields))
    for field in fields:
        field = field if isinstance(field, bytes) else field.encode()
        out += struct.pack("<I", len(field)) + field
    return out


SET, GET, ADD, CHECK, DELETE, NUMKEYS, WAIT, CMPSET, AUTH = range(1, 10)
put("store_protocol", "session",
    message(AUTH, b"", b"n" * 32) + message(SET, "loom/rendezvous/token/0", "abc") +
    message(GET, "loom/rendezvous/token/0") + message(ADD, "count", struct.pack("<q", 1)) +
    message(ADD, "count", struct.pack("<q", -5)) + message(CHECK, "count", "absent") +
    message(WAIT, "count") + message(CMPSET, "k", "", "v") + message(CMPSET, "k", "v", "w") +
    message(DELETE, "k") + message(NUMKEYS))
put("store_protocol", "add-to-text", message(SET, "x", "text") + message(ADD, "x", b"\1" * 8))
put("store_protocol", "http", "GET / HTTP/1.1\r\nHost: store\r\n\r\n")
put("store_protocol", "truncated", message(SET, "key", "value")[:-2])

# --- the tcp backend's handshake and call headers (tcp_peer_protocol.h)
HELLO = 41


def call_header(kind, sequence, dtype, root, numel, magic=0x31504354):
    return struct.pack("<IIQiiq", magic, kind, sequence, dtype, root, numel)


put("tcp_peer_protocol", "hello",
    message(HELLO, b"p" * 32, b"n" * 32, "world/1", "1", "0", "1") +
    call_header(1, 1, 6, 0, 1024) + call_header(6, 3, 15, 0, 70001))
put("tcp_peer_protocol", "hello-outside-group", message(HELLO, b"p" * 32, b"n" * 32, "g/1", "7", "0", "2"))
put("tcp_peer_protocol", "headers",
    call_header(2, 9, 6, 3, 0) + call_header(99, 2**63, -1, -5, -(2**40)) +
    call_header(1, 1, 6, 0, 4, magic=0))
put("tcp_peer_protocol", "http", "GET / HTTP/1.1\r\nHost: rank\r\n\r\n")

# --- configuration: YAML, then --set lines
put("config", "demo", "model: cnn\ntrain:\n  epochs: 3\n  lr: 0.05\ndata:\n  batch_size: 64\n")
put("config", "transforms",
    "data:\n  source: image_folder\n  path: /data/train\n  transforms:\n"
    "    - {random_resized_crop: {size: 224, scale: [0.08, 1.0]}}\n    - {horizontal_flip: {}}\n"
    "    - {gaussian_blur: {kernel: 11, sigma: 2.0}}\n")
put("config", "sets", "seed: 7\n\n--set\ntrain.epochs=1\ndata.global_batch=128\n"
    "parallel.mode=ps\nparallel.ps.servers=2\nparallel.ps.mode=ssp\nparallel.ps.staleness=2\n")
put("config", "pipeline", "model: resnet18\nparallel:\n  pipeline:\n    stages: 2\n"
    "    micro_batches: 4\n    schedule: 1f1b\n")
put("config", "typo", "trian:\n  epochs: 3\n--set\nmodel=vit\n")


# --- safetensors
def safetensors(tensors, metadata=None):
    header, data = {}, b""
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    if metadata:
        header["__metadata__"] = metadata
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


put("safetensors", "model", safetensors({
    "fc.weight": ("F32", [2, 3], struct.pack("<6f", *range(6))),
    "fc.bias": ("BF16", [2], b"\x80\x3f\x00\x40"),
    "steps": ("I64", [], struct.pack("<q", 9)),
    "mask": ("BOOL", [3], b"\x01\x00\x01"),
}, {"format": "pt"}))
put("safetensors", "empty", safetensors({}))
put("safetensors", "bad-range", safetensors({"w": ("F32", [4], b"\0" * 8)}))

# --- checkpoint manifests
manifest = {
    "format": "loom-checkpoint", "version": 1, "step": 937, "epoch": 1, "step_in_epoch": 0,
    "samples": 59968,
    "loader": {"epoch": 1, "rank": 0, "samples": 60000, "seed": 0, "step": 0,
               "steps_per_epoch": 937, "world": 1},
    "optimizer": "sgd", "files": ["model.safetensors", "state.safetensors"],
    "config": {"model": "cnn", "seed": 0},
    "layout": {"ranks": 2, "data_parallel": 2, "pipeline_stages": 1},
    "autotune": {"threads": 2, "prefetch_batches": 4},
}
put("checkpoint_manifest", "full", json.dumps(manifest, indent=2))
put("checkpoint_manifest", "no-loader", json.dumps({k: v for k, v in manifest.items() if k != "loader"}))
put("checkpoint_manifest", "wrong-types", json.dumps(dict(manifest, step="937", loader={"epoch": []})))


# --- images: 8 bytes choosing the window, then the file
def encoded(image, fmt, **options):
    out = io.BytesIO()
    image.save(out, fmt, **options)
    return out.getvalue()


gradient = Image.frombytes("RGB", (24, 16), bytes((x * 10 + y * 3 + c * 50) % 256
                                                   for y in range(16) for x in range(24) for c in range(3)))
whole, window = b"\1" + b"\0" * 7, bytes([0x00, 0x04, 0x00, 0x02, 0x00, 0x0c, 0x00, 0x08])
put("image_decode", "jpeg-rgb", window + encoded(gradient, "JPEG", quality=80))
put("image_decode", "jpeg-progressive", whole + encoded(gradient, "JPEG", progressive=True))
put("image_decode", "jpeg-gray", window + encoded(gradient.convert("L"), "JPEG"))
put("image_decode", "jpeg-cmyk", whole + encoded(gradient.convert("CMYK"), "JPEG"))
put("image_decode", "png-rgb", window + encoded(gradient, "PNG"))
put("image_decode", "png-rgba", whole + encoded(gradient.convert("RGBA"), "PNG"))
put("image_decode", "png-palette", window + encoded(gradient.convert("P"), "PNG"))
put("image_decode", "png-gray16", whole + encoded(gradient.convert("L").convert("I"), "PNG"))


# --- tar shards (WebDataset layout), in each format Python writes
def shard(fmt, long_names=False):
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=fmt) as tar:
        for i in range(2):
            key = ("d" * 120 + "/" if long_names else "") + "sample%03d" % i
            for suffix, data in ((".jpg", encoded(gradient, "JPEG")), (".cls", str(i).encode())):
                info = tarfile.TarInfo(key + suffix)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


put("tar_shards", "ustar", shard(tarfile.USTAR_FORMAT))
put("tar_shards", "pax-long", shard(tarfile.PAX_FORMAT, long_names=True))
put("tar_shards", "gnu-long", shard(tarfile.GNU_FORMAT, long_names=True))
put("tar_shards", "cut-short", shard(tarfile.USTAR_FORMAT)[:1500])


# --- protobuf, by hand (no python3-protobuf needed)
def varint(v):
    v &= (1 << 64) - 1
    out = b""
    while True:
        byte = v & 0x7f
        v >>= 7
        out += bytes([byte | (0x80 if v else 0)])
        if not v:
            return out


def field(number, value):
    if isinstance(value, int):
        return varint(number << 3) + varint(value)
    value = value if isinstance(value, bytes) else value.encode()
    return varint(number << 3 | 2) + varint(len(value)) + value


def open_request(config, rank=0, world=1):
    return (field(1, 1) + field(2, b"c" * 32) + field(4, "host 42 rank 0") + field(5, config) +
            field(6, rank) + field(7, world) + field(8, 1))


put("data_worker_request", "synthetic",
    open_request("seed: 3\ndata:\n  source: synthetic\n  batch_size: 8\n"))
put("data_worker_request", "outside-root",
    open_request("data:\n  source: image_folder\n  path: /etc/../root\n"))
put("data_worker_request", "other-key",
    open_request("seed: 1\ntrain:\n  epochs: 3\ndata:\n  source: idx\n"))


def crc32c(data, crc=0):
    crc ^= 0xffffffff
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82f63b78 if crc & 1 else 0)
    return crc ^ 0xffffffff


def batch_reply(count, corrupt=False, seq_len=0):
    """Images [count, 5, 6, 3] and labels, or with seq_len int64 token windows and the next ids."""
    if seq_len:
        ids = [(7 * i) % 50257 for i in range(count * (seq_len + 1))]
        rows = [ids[r * (seq_len + 1):(r + 1) * (seq_len + 1)] for r in range(count)]
        inputs = b"".join(struct.pack("<%dq" % seq_len, *row[:-1]) for row in rows)
        targets = b"".join(struct.pack("<%dq" % seq_len, *row[1:]) for row in rows)
        dims, target_dims, input_type = (count, seq_len), (count, seq_len), field(12, 1)
    else:
        inputs = bytes((i % 251) for i in range(count * 90))
        targets = struct.pack("<%dq" % count, *range(count))
        dims, target_dims, input_type = (count, 5, 6, 3), (count,), b""
    indices = struct.pack("<%dq" % count, *range(100, 100 + count))
    crc = crc32c(inputs + targets + indices) ^ (1 if corrupt else 0)
    shape = b"".join(varint(v) for v in dims)
    target_shape = b"".join(varint(v) for v in target_dims)
    bad = b"".join(varint(v) for v in (0, 1, 0, 0))
    return (field(1, 0) + field(2, 3) + field(3, shape) + field(4, inputs) + field(5, targets) +
            field(6, indices) + varint(7 << 3 | 5) + struct.pack("<I", crc) + field(8, count) +
            field(9, bad) + field(10, 0) + input_type + field(13, target_shape))


put("batch_reply", "raw", b"\0" + batch_reply(4))
put("batch_reply", "bad-crc", b"\0" + batch_reply(2, corrupt=True))
put("batch_reply", "lz4-flag-on-raw", b"\1" + batch_reply(1))
put("batch_reply", "tokens", b"\2" + batch_reply(3, seq_len=5))
put("batch_reply", "tokens-as-images", b"\0" + batch_reply(3, seq_len=5))


# --- token shards (data/token_shard.h): 64-byte header, then the tokens
def token_shard(tokens, vocab, width=None, magic=b"LOOMTOKS", version=1, count=None):
    width = width or (2 if vocab <= 65536 else 4)
    header = magic + struct.pack("<IIQQQ", version, width, vocab,
                                 len(tokens) if count is None else count, 0x1234)
    header += b"\0" * (64 - len(header))
    return header + struct.pack("<%d%s" % (len(tokens), "H" if width == 2 else "I"), *tokens)


put("token_shard", "uint16", token_shard([2, 7, 65535, 300], 65536))
put("token_shard", "uint32", token_shard([70000, 1, 2], 100277))
put("token_shard", "short", token_shard([1, 2, 3], 1000)[:68])
put("token_shard", "count-overflow", token_shard([1, 2], 100277, count=(1 << 62) + 2))
put("token_shard", "id-past-vocab", token_shard([2, 7, 65535, 300], 1000))
put("token_shard", "uint32-id-past-vocab", token_shard([70000, 1, 100277], 100277))

print("seeds written under", ROOT, file=sys.stderr)
