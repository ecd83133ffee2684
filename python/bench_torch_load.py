"""The torch baselines of ``npm run bench:load``: how fast plain PyTorch gets the same weights into memory.

Given a directory of safetensors files, this script
  1. saves the same tensors once with ``torch.save`` into a cache file (kept while it is newer than
     every safetensors file it came from),
  2. warms the page cache with every input file, so all variants read from memory,
  3. times, each in a fresh Python process so that the peak RSS belongs to that variant alone:
     - ``torch.load(cache, map_location="cpu", weights_only=True)``, which reads every byte;
     - ``torch.load(..., mmap=True)`` plus touching every page, when this torch has it (2.1 and later);
     - weightcast_reader's zero-copy open of the safetensors files plus touching every page (one byte
       per page of every tensor, summed in torch, so the bytes are really mapped in),
and prints one JSON object: seconds, bytes, and peak RSS per variant.

Usage: python3 bench_torch_load.py MODEL_DIR [--cache FILE] [--no-warm]
The cache defaults to MODEL_DIR with ``.torch-save.pt`` appended (beside the directory, not inside it).
Exit codes: 0 measured, 2 bad input (a WeightcastReaderError), 3 torch missing.
"""

from __future__ import annotations

import argparse
import inspect
import json
import mmap
import os
import resource
import signal
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional

# The reader sits beside this script; importing it must not leave __pycache__ in the repository.
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import weightcast_reader as reader  # noqa: E402 (needs the path above)

try:
    torch = reader.require_torch()
except reader.WeightcastReaderError:
    torch = None  # main() reports it with its own exit code
VARIANTS = ("torch_load", "torch_load_mmap", "reader")
WARM_CHUNK_BYTES = 8 * 1024 * 1024
PAGE_BYTES = mmap.PAGESIZE


# ---------------------------------------------------------------------------------------------------
# Measurements, each run in a child process.


def _read_status(wanted: Dict[str, str]) -> Dict[str, int]:
    """The /proc/self/status fields named in `wanted` (kB values), in bytes under their new names."""
    found: Dict[str, int] = {}
    try:
        with open("/proc/self/status", "r", encoding="ascii", errors="replace") as status:
            for line in status:
                key, _, value = line.partition(":")
                if key in wanted:
                    found[wanted[key]] = int(value.split()[0]) * 1024
    except OSError:
        pass
    return found


def _status_bytes() -> Dict[str, int]:
    """Current resident memory by kind, from /proc/self/status (Linux); empty elsewhere."""
    return _read_status(
        {
            "VmRSS": "rss_bytes",
            "RssAnon": "rss_anon_bytes",
            "RssFile": "rss_file_bytes",
            "RssShmem": "rss_shmem_bytes",
        }
    )


def _peak_rss_bytes() -> int:
    """This program's peak resident memory: VmHWM, whose count starts at exec.

    ru_maxrss survives exec, and a child starts as a copy of its parent: started by a benchmark
    holding a large buffer, it reported the benchmark's size. It is the fallback where there is no
    /proc (and Linux reports it in KiB).
    """
    peak = _read_status({"VmHWM": "peak"}).get("peak")
    return peak if peak is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _plain(value: Any) -> Any:
    return value.data if isinstance(value, reader.RawTensor) else value


def _as_bytes(value: Any) -> Any:
    return _plain(value).reshape(-1).view(torch.uint8)


def _touch(values: List[Any]) -> int:
    """Reads one byte of every page each tensor covers; returns their sum so the work is not skipped."""
    total = 0
    for value in values:
        flat = _as_bytes(value)
        if flat.numel() == 0:
            continue
        # The first byte, then the first byte of each following page the tensor reaches.
        first_boundary = -flat.data_ptr() % PAGE_BYTES
        total += int(flat[0])
        if first_boundary < flat.numel():
            total += int(flat[first_boundary::PAGE_BYTES].sum())
    return total


def _tensor_bytes(values: List[Any]) -> int:
    return sum(_as_bytes(value).numel() for value in values)


def _mmap_load_problem() -> Optional[str]:
    if "mmap" in inspect.signature(torch.load).parameters:
        return None
    return f"torch {torch.__version__} has no torch.load(mmap=True) (added in torch 2.1)"


def measure_torch_load(cache: str, use_mmap: bool) -> Dict[str, Any]:
    before = _status_bytes().get("rss_bytes")
    started = time.perf_counter()
    extra = {"mmap": True} if use_mmap else {}
    state = torch.load(cache, map_location="cpu", weights_only=True, **extra)
    loaded = time.perf_counter()
    values = list(state.values())
    checksum = _touch(values) if use_mmap else None
    finished = time.perf_counter()
    return {
        "seconds": finished - started,
        "load_seconds": loaded - started,
        "touch_seconds": finished - loaded if use_mmap else None,
        "bytes": _tensor_bytes(values),
        "tensors": len(values),
        "checksum": checksum,
        "peak_rss_bytes": _peak_rss_bytes(),
        "rss_before_bytes": before,
        "peak_rss_added_bytes": None if before is None else _peak_rss_bytes() - before,
        **_status_bytes(),
    }


def measure_reader(model_dir: str) -> Dict[str, Any]:
    before = _status_bytes().get("rss_bytes")
    started = time.perf_counter()
    model = reader.open_dir(model_dir)
    values = list(model.tensors().values())
    opened = time.perf_counter()
    checksum = _touch(values)
    finished = time.perf_counter()
    copied = sum(len(file.copied) for file in model.files.values())
    return {
        "seconds": finished - started,
        "load_seconds": opened - started,
        "touch_seconds": finished - opened,
        "bytes": _tensor_bytes(values),
        "tensors": len(values),
        "copied_tensors": copied,
        "checksum": checksum,
        "peak_rss_bytes": _peak_rss_bytes(),
        "rss_before_bytes": before,
        "peak_rss_added_bytes": None if before is None else _peak_rss_bytes() - before,
        **_status_bytes(),
    }


def save_cache(model_dir: str, cache: str) -> Dict[str, Any]:
    """torch.save of every tensor, written under a temporary name and renamed, so a cache is whole."""
    started = time.perf_counter()
    with reader.open_dir(model_dir) as model:
        # Raw bytes (FP8 on an old torch) are saved as bytes: the same amount to load back.
        state = {name: _plain(value) for name, value in model.tensors().items()}
    partial = f"{cache}.partial-{os.getpid()}"
    try:
        torch.save(state, partial)
        os.replace(partial, cache)
    finally:
        del state  # unmaps the model files in this process
        if os.path.exists(partial):
            os.unlink(partial)
    return {"seconds": time.perf_counter() - started}


def run_child(mode: str, model_dir: str, cache: str) -> Dict[str, Any]:
    if mode == "reader":
        return measure_reader(model_dir)
    return measure_torch_load(cache, use_mmap=mode == "torch_load_mmap")


# ---------------------------------------------------------------------------------------------------
# The parent: prepares the cache and the page cache, then runs each variant in a fresh process.


def _spawn(mode: str, model_dir: str, cache: str) -> Dict[str, Any]:
    command = [sys.executable, os.path.abspath(__file__), model_dir, "--cache", cache, "--child", mode]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{mode} child exited {done.returncode}: {done.stderr[-2000:]}")
    return json.loads(done.stdout)


def _cache_is_fresh(cache: str, inputs: List[str]) -> bool:
    if not os.path.isfile(cache):
        return False
    newest_input = max(os.stat(path).st_mtime_ns for path in inputs)
    return os.stat(cache).st_mtime_ns > newest_input


def _warm(paths: List[str]) -> float:
    started = time.perf_counter()
    buffer = bytearray(WARM_CHUNK_BYTES)
    for path in paths:
        with open(path, "rb", buffering=0) as handle:
            while handle.readinto(buffer):
                pass
    return time.perf_counter() - started


def benchmark(model_dir: str, cache: Optional[str], warm: bool) -> Dict[str, Any]:
    with reader.open_dir(model_dir) as model:
        inputs = [file.path for file in model.files.values()]
        tensor_bytes = sum(info.nbytes for file in model.files.values() for info in file.infos.values())
        tensor_count = len(model.keys())
    cache_path = cache if cache is not None else model_dir.rstrip(os.sep) + ".torch-save.pt"
    reused = _cache_is_fresh(cache_path, inputs)
    # Saving runs here: this process's memory is not measured, and each child costs a torch import.
    save_seconds = None if reused else save_cache(model_dir, cache_path)["seconds"]
    warm_seconds = _warm(inputs + [cache_path]) if warm else None
    result: Dict[str, Any] = {
        "model_dir": model_dir,
        "files": len(inputs),
        "file_bytes": sum(os.stat(path).st_size for path in inputs),
        "tensor_bytes": tensor_bytes,
        "tensors": tensor_count,
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "page_bytes": PAGE_BYTES,
        "page_cache": "warm" if warm else "as found",
        "warm_seconds": warm_seconds,
        "cache": {
            "path": cache_path,
            "bytes": os.stat(cache_path).st_size,
            "reused": reused,
            "save_seconds": save_seconds,
        },
    }
    mmap_problem = _mmap_load_problem()
    for variant in VARIANTS:
        skip = variant == "torch_load_mmap" and mmap_problem is not None
        result[variant] = {"skipped": mmap_problem} if skip else _spawn(variant, model_dir, cache_path)
    return result


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description="torch.save/torch.load baselines for a safetensors model directory.")
    parser.add_argument("model_dir", help="a directory of safetensors files")
    parser.add_argument("--cache", help="the torch.save file (default: MODEL_DIR.torch-save.pt)")
    parser.add_argument("--no-warm", action="store_true", help="do not read the files once before timing")
    parser.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    # A SIGTERM (the benchmark's timeout or Ctrl-C) unwinds normally, so no partial cache file is left.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    if torch is None:
        print(json.dumps({"error": "TORCH_MISSING", "message": f"no torch for {sys.executable}"}), file=sys.stderr)
        return 3
    try:
        if args.child is not None:
            output = run_child(args.child, args.model_dir, args.cache)
        else:
            output = benchmark(args.model_dir, args.cache, warm=not args.no_warm)
    except reader.WeightcastReaderError as error:
        print(json.dumps({"error": error.code, "message": error.args[0]}), file=sys.stderr)
        return 2
    print(json.dumps(output))
    return 0


if __name__ == "__main__":
    sys.exit(main())
