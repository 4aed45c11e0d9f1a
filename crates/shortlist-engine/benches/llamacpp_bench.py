"""The llama.cpp side of compare-llamacpp.sh, through llama-cpp-python: the same measurements as
examples/bench.rs (load, prefill of N-token prompts in 512-token batches, greedy decode at batch 1,
peak RSS), one JSON line each.

usage: python llamacpp_bench.py MODEL.gguf PREFILL_SIZES DECODE_TOKENS THREADS

Needs `llama_cpp` importable (PYTHONPATH) and, for a package built without its library,
LLAMA_CPP_LIB_PATH. Peak RSS includes the Python interpreter and numpy.
"""

import json
import resource
import sys
import time

import llama_cpp
import numpy as np

FILLER = (
    "The history of the city is long and varied. Merchants came from the coast to trade salt, "
    "cloth and iron, and the markets grew around the river crossing. Over the centuries the town walls were rebuilt "
    "three times, each time wider, as new quarters filled with workshops, schools and gardens. "
)


def emit(metric, value):
    print(json.dumps({"metric": metric, "value": value}), flush=True)


def main():
    path, sizes, n_decode, threads = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    t = time.time()
    llm = llama_cpp.Llama(
        model_path=path, n_ctx=4096, n_threads=threads, n_threads_batch=threads, n_batch=512, verbose=False
    )
    emit("load_s", time.time() - t)
    ids = llm.tokenize((FILLER * 200).encode(), add_bos=True, special=True)
    for n in (int(x) for x in sizes.split(",")):
        llm.reset()
        t = time.time()
        llm.eval(ids[:n])
        emit(f"prefill_{n}_tok_s", n / (time.time() - t))
    llm.reset()
    llm.eval(ids[:8])
    vocab = llm.n_vocab()
    t = time.time()
    for _ in range(n_decode):
        logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm._ctx.ctx, -1), shape=(vocab,))
        llm.eval([int(logits.argmax())])
    emit(f"decode_{n_decode}_tok_s", n_decode / (time.time() - t))
    emit("peak_rss_mb", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3)


if __name__ == "__main__":
    main()
