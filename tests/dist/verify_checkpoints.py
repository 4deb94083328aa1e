"""Checks a checkpoint directory the way a reader after a crash sees it
(docs/FORMATS.md, "Training checkpoints"), independently of meshtrain's own
reader: every step-NNNNNNNN/ entry is a complete checkpoint (metadata.json of
format_version 2 that passes its own checksum and whose every listed file is
there with its size; a shard file's header and each of its slices' three
tensors with their CRC32C, covering every byte of the file; every tensor's
slices adding up to its size; any other file with its whole-file CRC32C);
`latest`, when present, names one of them; .tmp- leftovers are allowed.
Usage: verify_checkpoints.py DIR [--require-latest]
Prints one summary line; exit status 1 with the reason when a check fails."""
import json
import os
import re
import struct
import sys

# CRC32C (Castagnoli, reflected polynomial 0x82F63B78), table-driven.
TABLE = []
for i in range(256):
    c = i
    for _ in range(8):
        c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    TABLE.append(c)


def crc32c(data):
    crc = 0xFFFFFFFF
    table = TABLE
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


assert crc32c(b"123456789") == 0xE3069283


def check_one(path):
    """The reason `path` is not a complete checkpoint, or None."""
    meta_path = os.path.join(path, "metadata.json")
    if not os.path.isfile(meta_path):
        return "no metadata.json"
    try:
        meta = json.load(open(meta_path))
    except ValueError as e:
        return "metadata.json is not JSON (%s)" % e
    if meta.get("format_version") != 2:
        return "format_version %r" % meta.get("format_version")
    # Its own checksum: the CRC32C of the compact dump, keys sorted, without the field.
    rest = {k: v for k, v in meta.items() if k != "metadata_crc32c"}
    dump = json.dumps(rest, separators=(",", ":"), sort_keys=True, ensure_ascii=False).encode()
    if meta.get("metadata_crc32c") != "%08x" % crc32c(dump):
        return "metadata.json fails its own checksum"
    covered = {name: 0 for name in meta["tensors"]}
    for f in meta["files"]:
        p = os.path.join(path, f["name"])
        if not os.path.isfile(p):
            return "%s is missing" % f["name"]
        data = open(p, "rb").read()
        if len(data) != f["bytes"]:
            return "%s has %d bytes, metadata.json says %d" % (f["name"], len(data), f["bytes"])
        if "slices" in f:
            why = check_shard(f, data, covered, meta["states"])
            if why:
                return "%s: %s" % (f["name"], why)
        elif "%08x" % crc32c(data) != f["crc32c"]:
            return "%s: CRC32C mismatch" % f["name"]
    for name, t in meta["tensors"].items():
        n = 1
        for d in t["shape"]:
            n *= d
        if covered[name] != n:
            return "the slices of %s cover %d of its %d elements" % (name, covered[name], n)
    return None


def check_shard(f, data, covered, states):
    """Why the safetensors file `data` does not match its entry `f`, or None;
    adds each slice's element count to covered[tensor]."""
    (n,) = struct.unpack("<Q", data[:8])
    if "%08x" % crc32c(data[: 8 + n]) != f["header_crc32c"]:
        return "header CRC32C mismatch"
    header = json.loads(data[8 : 8 + n])
    checked = 0
    for s in f["slices"]:
        for k, suffix in enumerate(states):  # "", then the optimizer's (".exp_avg", ...)
            entry = header.get(s["tensor"] + suffix)
            if entry is None or entry["shape"] != s["shape"] or entry["dtype"] != "F32":
                return "no F32 tensor %s%s of shape %s" % (s["tensor"], suffix, s["shape"])
            b, e = entry["data_offsets"]
            if "%08x" % crc32c(data[8 + n + b : 8 + n + e]) != s["crc32c"][k]:
                return "CRC32C mismatch in %s%s" % (s["tensor"], suffix)
            checked += e - b
        count = 1
        for d in s["shape"]:
            count *= d
        covered[s["tensor"]] += count
    if 8 + n + checked != len(data):
        return "the slices' CRC32Cs cover %d of its %d bytes" % (8 + n + checked, len(data))
    return None


def main():
    root = sys.argv[1]
    require_latest = "--require-latest" in sys.argv[2:]
    complete, leftovers = [], 0
    if not os.path.isdir(root) and not require_latest:
        print("0 complete checkpoint(s) verified, latest none, 0 leftover temporaries (no %s yet)" % root)
        return 0
    for name in sorted(os.listdir(root)):
        if re.fullmatch(r"step-\d{8}", name):
            why = check_one(os.path.join(root, name))
            if why:
                print("FAIL %s/%s is visible but not a complete checkpoint: %s" % (root, name, why))
                return 1
            complete.append(name)
        elif ".tmp" in name:
            leftovers += 1
    latest = os.path.join(root, "latest")
    if os.path.exists(latest):
        named = open(latest).read().strip()
        if named not in complete:
            print("FAIL latest names %r, which is not a complete checkpoint" % named)
            return 1
    elif require_latest:
        print("FAIL no latest file in %s" % root)
        return 1
    else:
        named = "none"
    print("%d complete checkpoint(s) verified, latest %s, %d leftover temporaries" % (len(complete), named, leftovers))
    return 0


if __name__ == "__main__":
    sys.exit(main())
