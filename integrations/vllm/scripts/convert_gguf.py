"""Converts a GGUF model (the project's SmolLM2-135M Q4_1) into the HF safetensors folder vLLM loads.

    convert_gguf.py MODEL.gguf OUT_DIR [--dtype float32|bfloat16]

transformers dequantizes the GGUF's weights (Q4_1 blocks become float tensors) and writes config.json,
model.safetensors and the tokenizer files. The loaded config carries a `quantization_config` that says
"gguf"; it (and the model's GGUF quantizer) is dropped before saving, since the folder holds plain float
weights and vLLM would otherwise look for a GGUF quantization method. OUT_DIR must not exist yet, or must hold an earlier conversion of the
same file (its `kvevict_source.json` names the file and its size): a finished folder is never overwritten,
and a half-written one is removed first. Exit 2 for bad arguments, 1 for a failed conversion.
"""

import argparse
import json
import os
import shutil
import sys


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("gguf", help="the .gguf file to convert")
    parser.add_argument("out", help="the folder to write (created)")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    args = parser.parse_args(argv)
    if not os.path.isfile(args.gguf):
        parser.error(f"gguf: '{args.gguf}' is not a file")
    source = {"gguf": os.path.abspath(args.gguf), "bytes": os.path.getsize(args.gguf), "dtype": args.dtype}
    marker = os.path.join(args.out, "kvevict_source.json")
    if os.path.exists(args.out):
        if os.path.isfile(marker):
            with open(marker) as f:
                if json.load(f) == source:
                    print(args.out)
                    return 0
            parser.error(f"out: '{args.out}' holds a conversion of another file; remove it or pick another folder")
        if os.path.isfile(os.path.join(args.out, "config.json")) or not os.path.isdir(args.out) or os.listdir(args.out):
            parser.error(f"out: '{args.out}' exists and is not a kvevict conversion; it is left as it is")

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = os.path.split(os.path.abspath(args.gguf))
    partial = args.out.rstrip("/") + ".partial"
    shutil.rmtree(partial, ignore_errors=True)
    try:
        tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=getattr(torch, args.dtype))
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.hf_quantizer = None  # the weights are plain floats now; nothing is left to quantize
        model.save_pretrained(partial)
        tok.save_pretrained(partial)
        with open(os.path.join(partial, "kvevict_source.json"), "w") as f:
            json.dump(source, f)
        if os.path.isdir(args.out):
            os.rmdir(args.out)
        os.rename(partial, args.out)
    except Exception as e:  # a half-written folder never looks finished
        shutil.rmtree(partial, ignore_errors=True)
        print(f"convert_gguf.py: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
