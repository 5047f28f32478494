"""A tiny training script showing the checkpoint-and-resume contract for preemptible capacity.

- Vertex AI sets ``AIP_CHECKPOINT_DIR`` (``<base_output_dir>/checkpoints/``) in every worker;
  every attempt of an airflow-gpu-sched task gets the same one.
- Save progress there regularly (at least every few hours on SPOT), and on SIGTERM (the
  notice a preempted VM gets), atomically: write to a temporary file, then rename.
- On start, resume from the newest checkpoint instead of step 0.
A local folder works too (the emulator's ``--execute`` mode); use gcsfs or the GCS FUSE mount
(``/gcs/<bucket>/...``) for ``gs://`` paths on Vertex AI.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path


def checkpoint_dir() -> Path:
    raw = os.environ.get("AIP_CHECKPOINT_DIR", "./checkpoints/")
    if raw.startswith("gs://"):  # Vertex mounts buckets under /gcs/
        raw = "/gcs/" + raw[len("gs://"):]
    path = Path(raw)
    path.mkdir(parents=True, exist_ok=True)
    return path


def load(folder: Path) -> dict:
    latest = folder / "latest.json"
    return json.loads(latest.read_text()) if latest.exists() else {"step": 0, "loss": None}


def save(folder: Path, state: dict) -> None:
    tmp = folder / "latest.json.tmp"
    tmp.write_text(json.dumps(state))
    tmp.replace(folder / "latest.json")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--step-seconds", type=float, default=0.05)
    parser.add_argument("--checkpoint-every", type=int, default=10)
    args, _ = parser.parse_known_args()

    folder = checkpoint_dir()
    state = load(folder)
    print(f"resuming from step {state['step']}" if state["step"] else "starting from step 0", flush=True)

    def on_sigterm(signum, frame):  # preemption notice: save and stop
        save(folder, state)
        print(f"SIGTERM: checkpointed at step {state['step']}", flush=True)
        sys.exit(143)

    signal.signal(signal.SIGTERM, on_sigterm)
    while state["step"] < args.steps:
        time.sleep(args.step_seconds)
        state["step"] += 1
        state["loss"] = round(1.0 / state["step"], 6)
        if state["step"] % args.checkpoint_every == 0:
            save(folder, state)
    save(folder, state)
    print(f"done at step {state['step']}, loss {state['loss']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
