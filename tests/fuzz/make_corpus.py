#!/usr/bin/env python3
"""Writes the seed corpora (tests/fuzz/corpus/<target>/) and the libFuzzer
dictionaries (tests/fuzz/*.dict). Deterministic; rerun after changing a
format, then commit the result. Usage: python3 tests/fuzz/make_corpus.py"""
import gzip
import json
import os
import re
import shutil
import struct
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def gz(b):
    return gzip.compress(b, compresslevel=9, mtime=0)


def idx_images(n, rows, cols, pixels):
    return struct.pack(">IIII", 0x803, n, rows, cols) + bytes(pixels)


def idx_labels(labels, n=None):
    return struct.pack(">II", 0x801, len(labels) if n is None else n) + bytes(labels)


def frame(images, labels):
    """The idx targets' framing: 4-byte LE length of the image part."""
    return struct.pack("<I", len(images)) + images + labels


def model_file(spec, params):
    header = json.dumps(spec, separators=(",", ":")).encode()
    floats = struct.pack("<%df" % len(params), *params)
    return (b"HSGDMODEL1\n" + struct.pack("<I", len(header)) + header + floats +
            struct.pack("<I", zlib.crc32(floats)))


def corpora():
    px = [0, 1, 2, 3, 4, 5, 128, 129, 130, 131, 254, 255]
    img, lab = idx_images(2, 2, 3, px), idx_labels([7, 0])
    idx = {
        "valid_2x2x3": frame(img, lab),
        "valid_1x4x4": frame(idx_images(1, 4, 4, range(16)), idx_labels([9])),
        "bad_magic": frame(lab, lab),
        "truncated_pixels": frame(img[:-2], lab),
        "trailing_bytes": frame(img + b"xx", lab),
        "count_mismatch": frame(img, idx_labels([7, 0, 1])),
        "label_10": frame(img, idx_labels([7, 10])),
        "header_lies_1e9_images": frame(idx_images(1000000000, 28, 28, px), lab),
        "huge_dims": frame(idx_images(0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, px), lab),
        "zero_images": frame(idx_images(0, 2, 3, []), lab),
    }
    idx_gz = {
        "valid_2x2x3": frame(gz(img), gz(lab)),
        "valid_members": frame(gz(img[:7]) + gz(img[7:]), gz(lab)),
        "truncated_stream": frame(gz(img)[:-12], gz(lab)),
        "header_lies_1e9_images": frame(gz(idx_images(1000000000, 28, 28, px)), gz(lab)),
        "isize_lies": frame(gz(img)[:-4] + struct.pack("<I", 0xFFFFFFF0), gz(lab)),
        "corrupt_deflate": frame(b"\x1f\x8b\x08\0\0\0\0\0\0\x03\xff\xff\xff\xffnot deflate", gz(lab)),
        "trailing_garbage": frame(gz(img) + b"junk", gz(lab)),
    }
    rec = lambda label, seed: bytes([label]) + bytes((seed + i) % 256 for i in range(3072))
    cifar10 = {
        "valid_1": rec(3, 0),
        "valid_2": rec(0, 1) + rec(9, 7),
        "label_10": rec(10, 0),
        "truncated": rec(1, 0)[:-1],
        "empty": b"",
        "gzip_1": gz(rec(5, 2)),
    }
    csv = {
        "valid": b"0,1.5,2\n1,-3,4e2\n2,+0.5,.25\n",
        "valid_crlf_trailing_blank": b"1, 2 ,3\r\n0,4,5\r\n\r\n",
        "valid_label_float": b"3.0,1\n0,2\n",
        "header_row": b"label,x,y\n0,1,2\n",
        "ragged": b"0,1,2\n1,2\n",
        "nan_inf": b"0,nan,1\n1,inf,2\n",
        "overflow": b"0,1e39,1\n",
        "negative_label": b"-1,1,2\n",
        "blank_inside": b"0,1\n\n1,2\n",
        "only_label": b"0\n1\n",
        "empty": b"",
        "gzip": gz(b"0,1,2\n1,3,4\n"),
    }
    libsvm = {
        "valid": b"1 1:0.5 3:2\n0 2:-1 # comment\n2 1:1 2:2 3:3\n",
        "valid_tabs": b"1\t1:0.5\t2:1e-3\n0 4:7\n",
        "decreasing": b"0 3:1 2:1\n",
        "index_zero": b"0 0:1\n",
        "huge_index": b"0 1073741824:1\n",
        "header_lies_dense": b"0 1000000:1\n" + b"0 1:1\n" * 100,
        "no_colon": b"0 1\n",
        "no_features": b"0\n1\n",
        "empty": b"",
        "gzip": gz(b"1 1:1 2:2\n0 2:3\n"),
    }
    config = {
        "minimal": b"[train]\nworkers = 2\n",
        "full_keys": b"[data]\nspec = \"synthetic\"\ntest_fraction = 0.25\n[model]\nname = \"mlp\"\n"
                     b"hidden = [16, 8]\n[train]\nworkers = 3\nbatch = 32\nbudget = 1.5\n"
                     b"runtime = \"sim\"\n[policy]\nname = \"kasync:2\"\naggregation = \"sum\"\n"
                     b"[optim]\nlr = 0.05\n[stragglers]\nfraction = 0.5\nsigma = 0.25\n",
        "not_toml_json": b"{\"train\": {\"workers\": 2}}\n",
        "unknown_key": b"[train]\nspeed = 3\n",
        "wrong_type": b"[train]\nworkers = \"four\"\n",
        "top_level_key": b"workers = 3\n",
        "bad_value": b"[train]\nworkers = 0\n",
        "newline_in_string": b"[train]\nruntime = \"a\\nb\"\n",
        "binary": bytes(range(256)),
        "empty": b"",
    }
    for name in sorted(os.listdir(os.path.join(ROOT, "examples"))) + [
            "paper/" + n for n in sorted(os.listdir(os.path.join(ROOT, "examples", "paper")))]:
        if name.endswith(".toml"):
            with open(os.path.join(ROOT, "examples", name), "rb") as f:
                config["example_" + name.replace("/", "_")] = f.read()
    softmax = {"name": "softmax", "sample_shape": [4], "num_classes": 3, "hidden": [128],
               "num_params": 15, "input_mean": 0.5, "input_std": 2.0}
    mlp = {"name": "mlp", "sample_shape": [2, 2], "num_classes": 2, "hidden": [3],
           "num_params": 4 * 3 + 3 + 3 * 2 + 2}
    model = {
        "valid_softmax": model_file(softmax, [0.1 * i for i in range(15)]),
        "valid_mlp": model_file(mlp, [0.0] * 23),
        "bad_magic": b"HSGDMODEL0\n" + model_file(softmax, [0.0] * 15)[11:],
        "bad_crc": model_file(softmax, [0.0] * 15)[:-1] + b"\0",
        "header_lies_num_params": model_file(dict(softmax, num_params=1 << 39), []),
        "header_lies_hidden": model_file(dict(mlp, hidden=[1 << 30, 1 << 30]), [0.0] * 23),
        "header_len_lies": b"HSGDMODEL1\n" + struct.pack("<I", 0xFFFFFFFF) + b"{}",
        "float_classes": model_file(dict(softmax, num_classes=1e300), [0.0] * 15),
        "truncated": model_file(softmax, [0.0] * 15)[:40],
    }
    return {"idx": idx, "idx_gz": idx_gz, "cifar10": cifar10, "csv": csv, "libsvm": libsvm,
            "config": config, "model": model}


def dictionaries():
    numbers = ['"0"', '"1"', '"-1"', '"+"', '"-"', '"."', '"e"', '"E"', '"e-"', '"1e38"',
               '"1e39"', '"nan"', '"inf"', '"0x1p3"', '"2147483646"', '"2147483647"', '"3.0"']
    csv = ['","', '"\\x0a"', '"\\x0d\\x0a"', '" "', '"\\x09"'] + numbers
    libsvm = ['":"', '" "', '"\\x09"', '"#"', '"\\x0a"', '"1:"', '"1073741824"'] + numbers
    # Every section and key, from the generated reference (hsgd config --reference).
    keys = set()
    section = None
    with open(os.path.join(ROOT, "docs/config-reference.md")) as f:
        for line in f:
            m = re.match(r"## \[(\w+)\]", line)
            section = m.group(1) if m else section
            m = re.match(r"\| `(\w+)` \|", line)
            if m and section:
                keys.add((section, m.group(1)))
    toml = ['"["', '"]"', '"[["', '"]]"', '"="', '"\\""', '"\'"', '"\\"\\"\\""', '"{"', '"}"',
            '","', '"#"', '"\\x0a"', '"true"', '"false"', '"inf"', '"nan"', '"1979-05-27"',
            '"0x"', '"0o"', '"0b"', '"_"', '"\\\\u"']
    toml += sorted({'"[%s]"' % s for s, _ in keys}) + sorted({'"%s"' % k for _, k in keys})
    for words in ("threads sim mpi sync async hybrid kasync:2 kbatch:2 ssp:1 local:2 hogwild "
                  "softmax mlp lenet5 cifar-cnn linear-test synthetic fashion-mnist mean sum "
                  "step linear exponential cosine adaptive updates seconds epochs sgd momentum "
                  "nesterov adam halfnormal exponential lognormal none").split():
        toml.append('"%s"' % words)
    return {"csv": csv, "libsvm": libsvm, "toml": toml}


def main():
    for target, files in corpora().items():
        d = os.path.join(HERE, "corpus", target)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        for name, data in files.items():
            with open(os.path.join(d, name), "wb") as f:
                f.write(data)
    for name, entries in dictionaries().items():
        with open(os.path.join(HERE, name + ".dict"), "w") as f:
            f.write("# libFuzzer dictionary, written by make_corpus.py\n")
            f.write("\n".join(dict.fromkeys(entries)) + "\n")


if __name__ == "__main__":
    main()
