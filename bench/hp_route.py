"""The modules that train.train passes its hyperparameters through, in call order.

    python prepro.py                                  # the demo data, once
    python bench/hp_route.py --steps 2 --logdir /tmp/route
    python bench/hp_route.py --steps 2 --logdir /tmp/route_old --tree /tmp/old \
        --prepro_dir prepro/demo --data_dir data/demo

Runs train.py's main for a few demo steps (``--tree``: another checkout's, on this
checkout's data) under a profiler that records every call of the project's code that
receives an ``hparams.Hparams`` object as an argument. Prints the modules those calls
enter, in order (a module repeated back to back counted once), how many distinct modules
the route enters, and how many times it returns to a module it had left, per module.
"""

import argparse
import json
import os
import sys

import common


def route(calls: list[str]) -> dict:
    """The route of the modules ``calls`` (one per call, in order): the modules entered,
    consecutive repeats merged; the distinct ones; and the returns to a module left
    earlier, in all and per module."""
    modules = [m for i, m in enumerate(calls) if i == 0 or calls[i - 1] != m]
    seen, back = set(), {}
    for m in modules:
        if m in seen:
            back[m] = back.get(m, 0) + 1
        seen.add(m)
    return {
        "route": modules,
        "modules": sorted(seen),
        "returns": sum(back.values()),
        "back_to": dict(sorted(back.items(), key=lambda kv: -kv[1])),
    }


def traced_calls(tree: str, train_args: list[str]) -> list[str]:
    """The module of every call into ``tree``'s code that takes an Hparams argument while
    train.py's main runs with ``train_args``."""
    import train
    from transformer_tf2.config import hparams

    calls = []

    def profile(frame, event, arg):
        code = frame.f_code
        if event != "call" or not code.co_filename.startswith(tree + os.sep):
            return
        names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
        if any(isinstance(frame.f_locals.get(n), hparams.Hparams) for n in names):
            calls.append(os.path.relpath(code.co_filename, tree)[: -len(".py")])

    sys.argv = ["train.py", *train_args]
    sys.setprofile(profile)
    try:
        train.main()
    except SystemExit:
        pass
    finally:
        sys.setprofile(None)
    return calls


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=2, help="training steps (train.py --max_steps)")
    ap.add_argument("--logdir", required=True, help="the run's folder (a new one)")
    ap.add_argument("--tree", default="", help="another checkout of the project to trace")
    ap.add_argument("--prepro_dir", default="", help="train.py --prepro_dir")
    ap.add_argument("--data_dir", default="", help="train.py --data_dir")
    return ap


def main() -> None:
    args = parser().parse_args()
    tree = os.path.abspath(args.tree) if args.tree else common.ROOT
    if args.tree:
        common.use_tree(tree)
    train_args = ["--max_steps", str(args.steps), "--logdir", os.path.abspath(args.logdir)]
    for flag in ("prepro_dir", "data_dir"):
        if getattr(args, flag):
            train_args += [f"--{flag}", os.path.abspath(getattr(args, flag))]
    os.chdir(tree)
    result = route(traced_calls(tree, train_args))
    print(json.dumps(result))
    print(
        f"{len(result['modules'])} modules; {result['returns']} returns to a module left "
        f"earlier ({', '.join(f'{m} {n}' for m, n in result['back_to'].items())})"
    )


if __name__ == "__main__":
    main()
