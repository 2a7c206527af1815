"""What keeping a remote copy of the policy up to date costs per ``collect()``.

    python -m benchmarks.policy_shipping --rounds 5 --repeats 20

For each policy and case, one round times ``--repeats`` updates, each made of what a
collect does for its policy: :meth:`PolicyShipper.snapshot` (pickle the skeleton, compare
every storage's bytes with the last sent), pickling the snapshot for the pipe (skipped when
empty), and one copy applying it (:meth:`PolicyReplica.apply`). Sending it to the workers is
not included: that is one pipe write per worker of the pickled size reported. Reported:
milliseconds per update, median over rounds, and the bytes that would travel.

Policies: a small MLP (4 -> 64 -> 2 logits + value) and a ~10 MB one (2.6M float32
parameters). Cases: ``unchanged`` (nothing changed since the last collect) and ``changed``
(every parameter changed in place, as after an optimizer step).
"""

from __future__ import annotations

import argparse
import pickle
import statistics
import time

import torch

from parallel_rollouts.policy.shipping import PolicyReplica, PolicyShipper


def small_mlp() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(4, 64), torch.nn.Tanh(), torch.nn.Linear(64, 3))


def ten_megabyte_mlp() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(4, 1600), torch.nn.Tanh(), torch.nn.Linear(1600, 1600), torch.nn.Tanh(), torch.nn.Linear(1600, 3))


def one_round(model: torch.nn.Module, changed: bool, repeats: int) -> tuple[float, int]:
    shipper = PolicyShipper(model, "the benchmark sends the policy")
    replica = PolicyReplica(root_seed=0, first_env=0)
    replica.apply(shipper.snapshot())
    sizes = []
    elapsed = 0.0
    for _ in range(repeats):
        if changed:
            with torch.no_grad():
                for parameter in model.parameters():
                    parameter.add_(1e-3)
        start = time.perf_counter()
        snapshot = shipper.snapshot()
        payload = b"" if snapshot.empty else pickle.dumps(snapshot, protocol=pickle.HIGHEST_PROTOCOL)
        replica.apply(pickle.loads(payload) if payload else None)
        elapsed += time.perf_counter() - start
        sizes.append(len(payload))
    return elapsed / repeats * 1e3, int(statistics.median(sizes))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print("| policy | parameters | case | ms per collect (median of rounds) | bytes sent per worker |")
    print("|---|---:|---|---:|---:|")
    for name, make in (("small MLP", small_mlp), ("~10 MB MLP", ten_megabyte_mlp)):
        model = make()
        count = sum(parameter.numel() for parameter in model.parameters())
        for case in ("unchanged", "changed"):
            results = [one_round(model, case == "changed", args.repeats) for _ in range(args.rounds)]
            milliseconds = statistics.median(result[0] for result in results)
            print(f"| {name} | {count:,} | {case} | {milliseconds:.2f} | {results[-1][1]:,} |")


if __name__ == "__main__":
    main()
