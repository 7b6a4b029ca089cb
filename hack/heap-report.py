#!/usr/bin/env python3
"""What a heaptrack profile of the operator (hack/heaptrack-operator.sh) still held at its end,
grouped by call path: the bytes under each path of DEPTH frames, plumbing frames left out
(allocator, collections, serde's and the runtime's generic layers), largest first.

    hack/heap-report.py target/heaptrack/op.PID.gz [DEPTH] [UNDER]

UNDER keeps only the paths through a frame whose `function (file)` text contains it, shown
from there (e.g. `(watcher.rs)` for the cached objects, `(lifecycle.rs)` for the tasks).
"""
import collections
import re
import subprocess
import sys
import tempfile

PLUMBING = set("""mod.rs de.rs impls.rs map.rs alloc.rs raw_vec.rs boxed.rs node.rs entry.rs
string.rs slice.rs unix.rs select.rs park.rs runtime.rs blocking.rs poll_fn.rs vec.rs rc.rs
sync.rs ser.rs value.rs read.rs function.rs future.rs core.rs harness.rs raw.rs task.rs
worker.rs context.rs scoped.rs coop.rs local.rs thread.rs poll.rs pin.rs ops.rs option.rs
result.rs iter.rs adapters.rs spec_from_iter.rs spec_from_iter_nested.rs spec_extend.rs
into_iter.rs fold.rs cloned.rs copied.rs instrument.rs unwind_safe.rs panicking.rs panic.rs
unsafe_cell.rs""".split())


def main():
    path = sys.argv[1]
    depth = int(sys.argv[2]) if len(sys.argv) > 2 else 6
    under = sys.argv[3] if len(sys.argv) > 3 else None
    with tempfile.NamedTemporaryFile("r", suffix=".stacks") as stacks:
        subprocess.run(["heaptrack_print", "-f", path, "-p", "0", "-a", "0", "-T", "0",
                        "--flamegraph-cost-type", "leaked", "-F", stacks.name],
                       check=True, stdout=subprocess.DEVNULL)
        total, groups = 0, collections.Counter()
        for line in stacks:
            stack, _, n = line.rstrip().rpartition(" ")
            n = int(n)
            total += n
            frames = stack.split(";")
            if under:
                at = [i for i, f in enumerate(frames) if under in f]
                if not at:
                    continue
                frames = frames[at[-1]:]
            path_ = []
            for f in frames:
                m = re.match(r"(.*) \(([\w.]+)\)$", f)
                if not m or m.group(2) in PLUMBING or m.group(1).startswith("_R"):
                    continue
                step = f"{m.group(1)}@{m.group(2)}"
                if not path_ or path_[-1] != step:
                    path_.append(step)
            groups[" > ".join(path_[:depth])] += n
    print(f"held at the end: {total / 1e6:.2f} MB" + (f"; under {under}: {sum(groups.values()) / 1e6:.2f} MB" if under else ""))
    for k, v in groups.most_common(30):
        if v:
            print(f"{v / 1e6:8.2f} MB  {k[:400]}")


if __name__ == "__main__":
    main()
