"""Independent safetensors reader/writer for the checkpoint tests (struct + json + numpy only).

  safetensors_tool.py dump FILE   checks the layout of FILE and prints its contents as JSON
  safetensors_tool.py write FILE  writes a test file with F32, BF16 and F16 tensors
"""
import json
import struct
import sys

import numpy as np


def dump(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    assert n % 8 == 0, f"header length {n} is not a multiple of 8"
    text = raw[8:8 + n].decode("utf-8")
    assert text.rstrip(" ").endswith("}"), "the header may only be padded with spaces"
    header = json.loads(text)
    data = raw[8 + n:]
    out = {"metadata": header.pop("__metadata__", {}), "names": list(header), "tensors": {}}
    spans = []
    for name, e in header.items():
        assert e["dtype"] == "F32", e
        begin, end = e["data_offsets"]
        count = int(np.prod(e["shape"], dtype=np.int64))
        assert end - begin == 4 * count, (name, e)
        spans.append((begin, end))
        values = np.frombuffer(data[begin:end], dtype="<f4").reshape(e["shape"])
        out["tensors"][name] = {"shape": e["shape"], "values": [float(v) for v in values.reshape(-1)]}
    # The buffer is covered exactly, without gaps or overlaps.
    pos = 0
    for begin, end in sorted(spans):
        assert begin == pos, f"gap or overlap at {begin} (expected {pos})"
        pos = end
    assert pos == len(data), f"data buffer has {len(data)} bytes, tensors cover {pos}"
    print(json.dumps(out))


def write(path):
    tensors = []  # (name, dtype, shape, raw bytes)
    f32 = (np.arange(24, dtype=np.float32) * 0.5 - 3).reshape(2, 3, 4)
    tensors.append(("model.embed_tokens.weight", "F32", [2, 3, 4], f32.astype("<f4").tobytes()))
    tensors.append(("scalar", "F32", [], np.float32(2.5).astype("<f4").tobytes()))
    # Every 16-bit pattern, with its fp32 value as computed by numpy (f16) and by
    # the definition of bfloat16 (upper half of an fp32), stored beside it.
    bits = np.arange(65536, dtype=np.uint32).astype("<u2")
    tensors.append(("all_f16", "F16", [256, 256], bits.tobytes()))
    tensors.append(("all_f16_as_f32", "F32", [256, 256], bits.view("<f2").astype("<f4").tobytes()))
    tensors.append(("all_bf16", "BF16", [65536], bits.tobytes()))
    bf16_f32 = (bits.astype(np.uint32) << 16).view(np.float32)
    tensors.append(("all_bf16_as_f32", "F32", [65536], bf16_f32.astype("<f4").tobytes()))
    header = {"__metadata__": {"format": "pt", "writer": "python"}}
    offset = 0
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
    # Deliberately unpadded and of odd length, so that the data is misaligned.
    text = json.dumps(header).encode("utf-8")
    if len(text) % 2 == 0:
        text += b" "
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for _, _, _, raw in tensors:
            f.write(raw)


if __name__ == "__main__":
    {"dump": dump, "write": write}[sys.argv[1]](sys.argv[2])
