"""``make demo``: the nightly retraining DAG against the bundled emulator, and a strategies tour.

``run_nightly_demo`` (the default): starts the emulator with scarce H100 capacity (FLEX_START
GPUs free up 20 emulated minutes after the run starts), runs ``nightly_retraining`` (data prep
-> FLEX_START training -> evaluation) with ``airflow dags test`` on a throwaway SQLite home in
``.demo/``, then a hedged race (``race_training``: FLEX_START in two regions, SPOT in a third)
and the same plan in sequence, showing the winner, the cancelled others and the time saved; side
by side with those (a second lane: they share no capacity), the SPOT, persistent-resource and
tuned (tuning job -> training pipeline that registers a model) examples and the deploy DAG that
reads the model's Asset event. It prints a summary per training task, in a fixed order.

``run_demo`` (``--strategies``): one job of each capacity strategy submitted with the client
(FLEX_START waiting for H100s, a SPOT job preempted twice, a job queued behind another on a
one-replica persistent pool), each state change printed in emulated time.

May import: vertex, drawing, emulator, tools; never airflow.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

from airflow_gpu_sched.emulator import EmulatorServer, Scenario
from airflow_gpu_sched.emulator.control import EmulatorControl
from airflow_gpu_sched.tools.demo_progress import Progress, Summary
from airflow_gpu_sched.vertex.client import VertexClient
from airflow_gpu_sched.vertex.models import CustomJob

PROJECT, LOCATION = "demo-project", "us-central1"
POOL_ID = "a100-pool"


def _pool(machine: str, accelerator: str, count: int, run_minutes: int) -> dict:
    return {"machineSpec": {"machineType": machine, "acceleratorType": accelerator, "acceleratorCount": count},
            "replicaCount": "1",
            "containerSpec": {"imageUri": "us-docker.pkg.dev/demo/trainer:1", "args": ["--epochs=3"],
                              "env": [{"name": "EMULATOR_RUN_SECONDS", "value": str(run_minutes * 60)}]}}


def _scenario(speed: float) -> Scenario:
    return Scenario.model_validate({
        "seed": 1, "speed": speed, "provisioningSeconds": 120, "runSeconds": 900,
        "capacity": [
            {"location": LOCATION, "acceleratorType": "NVIDIA_H100_80GB", "flexStart": 0},
            {"location": LOCATION, "acceleratorType": "NVIDIA_H100_80GB", "flexStart": 8, "atSeconds": 1200},
        ],
        "persistentResources": [{"project": PROJECT, "location": LOCATION, "id": POOL_ID, "resource": {
            "displayName": "shared A100 pool",
            "resourcePools": [{"id": "a100s", "replicaCount": "1", "machineSpec": {
                "machineType": "a2-highgpu-1g", "acceleratorType": "NVIDIA_TESLA_A100", "acceleratorCount": 1}}]}}],
    })


JOBS = {
    "flex-start": {"displayName": "demo-flex-start", "labels": {"demo": "yes"}, "jobSpec": {
        "workerPoolSpecs": [_pool("a3-highgpu-8g", "NVIDIA_H100_80GB", 8, 20)],
        "scheduling": {"strategy": "FLEX_START", "maxWaitDuration": "2h"}}},
    "spot": {"displayName": "demo-spot", "labels": {"demo": "yes"}, "jobSpec": {
        "workerPoolSpecs": [_pool("a2-highgpu-1g", "NVIDIA_TESLA_A100", 1, 30)],
        "scheduling": {"strategy": "SPOT"}}},
    "persistent": {"displayName": "demo-persistent", "labels": {"demo": "yes"}, "jobSpec": {
        "workerPoolSpecs": [_pool("a2-highgpu-1g", "NVIDIA_TESLA_A100", 1, 10)],
        "persistentResourceId": POOL_ID}},
}


def demo_emulator(scenario: Scenario) -> EmulatorServer:
    """The demo's emulator, its control API behind a token made for this run: it executes the jobs'
    commands (``execute``), so no other local process may reset it or plant jobs through it."""
    import secrets

    return EmulatorServer(scenario, control_token=secrets.token_urlsafe(24))


def _minutes(start: datetime, at: datetime) -> str:
    seconds = int((at - start).total_seconds())
    return f"+{seconds // 3600:d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def run_demo(speed: float = 120.0) -> int:
    with demo_emulator(_scenario(speed)) as emulator:
        print(f"Vertex AI emulator at {emulator.url} (x{speed:g} speed: one real second is "
              f"{speed / 60:g} emulated minutes)\n")
        control = EmulatorControl(emulator.url, control_token=emulator.control_token)
        client = VertexClient(location=LOCATION, project=PROJECT, api_endpoint=emulator.url)
        blocker = dict(JOBS["persistent"], displayName="someone-elses-job")
        client.create_custom_job(blocker)  # keeps the pool's only replica busy for 10 minutes
        names = {label: client.create_custom_job(body).name for label, body in JOBS.items()}
        start = client.get_custom_job(names["flex-start"]).create_time
        seen: dict[str, str] = {}
        preemptions = 0
        jobs: dict[str, CustomJob] = {}
        while True:
            jobs = {label: client.get_custom_job(name) for label, name in names.items()}
            for label, job in jobs.items():
                state = job.state.value.removeprefix("JOB_STATE_")
                if seen.get(label) != state:
                    note = f"  ({job.error.message})" if job.error and job.error.message else ""
                    print(f"  {_minutes(start, job.update_time)}  {label:11} {state}{note}", flush=True)
                    seen[label] = state
            spot = jobs["spot"]
            if spot.state.value == "JOB_STATE_RUNNING" and preemptions < 2:
                control.preempt(spot.name)
                preemptions += 1
                print(f"  {_minutes(start, client.get_custom_job(spot.name).update_time)}  "
                      f"{'spot':11} preempted by the emulator (the service restarts it)", flush=True)
                continue
            if all(job.is_terminal() for job in jobs.values()):
                break
            time.sleep(0.5)
        print("\n  job          state       queued    ran       restarts")
        for label, job in jobs.items():
            history = control.history(job.name)
            running = _first_running(history)  # the emulator's own record; startTime is set at admission
            queued = (running - job.create_time).total_seconds() / 60 if running else 0
            ran = history["progressSeconds"] / 60
            print(f"  {label:12} {job.state.value.removeprefix('JOB_STATE_'):11} {queued:5.0f} min "
                  f"{ran:5.0f} min  {history['restarts']}")
        stats = control.stats()
        print(f"\n  emulator: {sum(stats['requests'].values())} API requests, "
              f"{stats['preemptions']} preemptions, jobs created {stats['jobsCreated']}")
        ok = all(job.state.value == "JOB_STATE_SUCCEEDED" for job in jobs.values())
        print("\nAll three jobs succeeded." if ok else "\nSome job did not succeed.")
        return 0 if ok else 1


NIGHTLY_SPEED = 120.0
# the example DAGs the nightly demo runs, in the order its summary and table list them
DEMO_DAGS = ("nightly_retraining", "spot_training", "persistent_resource_training", "nightly_retraining_tuned",
             "nightly_deploy", "race_training", "race_training_sequential")
POOL = {"displayName": "shared A100 pool", "resourcePools": [{"id": "a100s", "replicaCount": "1", "machineSpec": {
    "machineType": "a2-highgpu-1g", "acceleratorType": "NVIDIA_TESLA_A100", "acceleratorCount": 1}}]}


def _preempt_spot_past_the_restarts(control: EmulatorControl, client: VertexClient, stop: list) -> None:
    """Preempt the first SPOT job seven times (each after a second of running): the service
    restarts it six times, then gives up; the operator resubmits and the run resumes."""
    done, seen_running = 0, None
    while done < 7 and not stop:
        jobs = [j for j in client.list_custom_jobs(filter='labels.airflow-dag="spot_training"')]
        first = jobs[-1] if jobs else None
        if first is not None and first.state.value == "JOB_STATE_RUNNING":
            seen_running = seen_running or time.monotonic()
            if time.monotonic() - seen_running >= 1.0:
                control.preempt(first.name)
                done += 1
                seen_running = None
        else:
            seen_running = None
        time.sleep(0.1)


def examples_dir() -> Path:
    """The example DAGs: package data of an installed wheel, or (a checkout) ``dags_examples/``
    through the ``airflow_gpu_sched/examples`` symlink."""
    from importlib.resources import files

    return Path(str(files("airflow_gpu_sched") / "examples")).resolve()


def run_nightly_demo(speed: float = NIGHTLY_SPEED, workdir: str = ".demo") -> int:
    import threading

    out = Path(workdir).resolve()
    home = out / "airflow_home"
    shutil.rmtree(out, ignore_errors=True)
    home.mkdir(parents=True)
    dags = examples_dir()
    training = dags / "training"
    scenario = Scenario.model_validate({
        "seed": 1, "speed": speed, "provisioningSeconds": 120,
        "execute": True, "executeRoot": str(out / "vertex"), "executeWorkdir": str(training),
        "capacity": [{"location": LOCATION, "acceleratorType": "NVIDIA_H100_80GB", "flexStart": 0}],
        "persistentResources": [{"project": PROJECT, "location": LOCATION, "id": "a100-pool", "resource": POOL}]})
    with demo_emulator(scenario) as emulator:
        print(f"Vertex AI emulator at {emulator.url} (x{speed:g} emulated time; the jobs' training script "
              f"really runs: {training / 'train.py'})", flush=True)
        print(f"  dashboard (while the demo runs): {emulator.url}/", flush=True)
        env = {**os.environ,
               "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
               "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE": "True",
               "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
               "AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT": json.dumps({"conn_type": "google_cloud_platform", "extra": {
                   "project": PROJECT, "api_endpoint": emulator.url}}),
               "GPU_SCHED_PROJECT": PROJECT, "GPU_SCHED_LOCATION": LOCATION, "GPU_SCHED_POLL_INTERVAL": "0.3",
               "GPU_SCHED_DATA_DIR": str(home / "data")}
        airflow = str(Path(sys.executable).parent / "airflow")
        print("setting up a throwaway Airflow home (SQLite) in", home, flush=True)
        subprocess.run([airflow, "db", "migrate"], env=env, check=True, stdout=subprocess.DEVNULL)
        # Two lanes side by side, each DAG of a lane after the one before it (issue 38: the seven
        # one after the other took 200-250 s). What the lanes share is only the emulator, in parts
        # they never touch both: lane 1 the H100 capacity (the nightly job's FLEX_START wait, then
        # the race's regions, set per race DAG, so in sequence); lane 2 the A100s (SPOT, the
        # persistent pool and its blocker, the tuning trials) and the model the deploy DAG reads
        # from the tuned one's Asset event (so in sequence). Each lane has its own copy of the
        # migrated SQLite database: two `airflow dags test` writing one SQLite file lock it.
        lane_db = home / "airflow-lane2.db"
        shutil.copyfile(home / "airflow.db", lane_db)
        lane_env = {**env, "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{lane_db}"}
        control = EmulatorControl(emulator.url, control_token=emulator.control_token)
        client = VertexClient(location=LOCATION, project=PROJECT, api_endpoint=emulator.url)
        started = time.monotonic()
        summary = Summary(order=DEMO_DAGS)
        printing = threading.Lock()

        def say(text: str) -> None:
            """Print a block whole: the other lane's lines come before or after it, not inside."""
            with printing:
                print(text, flush=True)

        def dags_test(dag_id: str, story: str, when_queued=None, dag_env: dict | None = None) -> None:
            """``when_queued()`` runs once, when a job of the DAG is first seen QUEUED."""
            say(f"\nairflow dags test {dag_id}: {story}")
            log_path = home / f"{dag_id}.log"
            progress = Progress(dag_id, started)
            with open(log_path, "w") as log:
                process = subprocess.Popen([airflow, "dags", "test", dag_id], env=dag_env or env, stdout=log,
                                           stderr=subprocess.STDOUT)
                while process.poll() is None:  # a line at least every 10 s while it waits
                    states = [j.state.value.removeprefix("JOB_STATE_")
                              for j in client.list_custom_jobs(filter=f'labels.airflow-dag="{dag_id}"')]
                    if line := progress.line(states, time.monotonic()):
                        say(line)
                    if when_queued is not None and "QUEUED" in states:
                        when_queued()
                        when_queued = None
                    time.sleep(0.3)
            with printing:
                summary.ran(dag_id, "succeeded" if process.returncode == 0 else f"failed (log: {log_path})")
            if process.returncode != 0:
                say(log_path.read_text()[-4000:])
                raise SystemExit(f"airflow dags test {dag_id} failed; full log: {log_path}")

        def h100_lane() -> int:
            # FLEX_START: no H100s for 40 emulated minutes (20 s) after the job queued, then 8 free at
            # once. Counted from the queueing, not from here: on a loaded machine Airflow's start and
            # the data prep took longer than the 20 s, the job found its GPUs free and never queued.
            dags_test("nightly_retraining", "data prep -> FLEX_START training (waits for 8 H100s) -> evaluation",
                      when_queued=lambda: control.set_capacity(LOCATION, "NVIDIA_H100_80GB", flex_start=8,
                                                               at_seconds=2400))
            return _race_demo(control, emulator.url, dags_test, say)

        def a100_lane() -> int:
            stop: list = []
            preempter = threading.Thread(target=_preempt_spot_past_the_restarts, args=(control, client, stop),
                                         daemon=True)
            preempter.start()
            dags_test("spot_training", "SPOT preempted past the service's 6 restarts, resubmitted, resumes "
                                       "from its checkpoint", dag_env=lane_env)
            stop.append(True)

            blocker = client.create_custom_job({"displayName": "someone-elses-job", "jobSpec": {
                "persistentResourceId": "a100-pool", "workerPoolSpecs": [{
                    "machineSpec": {"machineType": "a2-highgpu-1g", "acceleratorType": "NVIDIA_TESLA_A100",
                                    "acceleratorCount": 1}, "replicaCount": "1",
                    "containerSpec": {"imageUri": "x",
                                      "command": ["python", "-c", "import time; time.sleep(25)"]}}]}})
            dags_test("persistent_resource_training", f"the pool's only replica is busy ({blocker.display_name}), "
                                                      "then frees", dag_env=lane_env)
            dags_test("nightly_retraining_tuned", "a tuning job (4 FLEX_START trials on A100s, 2 at a time) -> a "
                                                  "training pipeline with the best parameters registers the model",
                      dag_env=lane_env)
            models = list(client.list_models())  # every page (a page may be empty and carry a token)
            say("\n".join(f"  registered model {model.display_name}: {model.name} version {model.version_id}"
                          for model in models) or "the tuned example registered no model")
            if not models:
                return 1
            # scheduled on the model Asset: `airflow dags test` does not start it on the event, so it runs
            # next and reads the Asset's latest event (inlet_events), the one the tuned pipeline emitted
            dags_test("nightly_deploy", "scheduled on the model Asset: reads the new version's event, checks it",
                      dag_env=lane_env)
            deployed = [line.split("from the Asset's latest event: ", 1)[1] for line in
                        (home / "nightly_deploy.log").read_text().splitlines()
                        if "from the Asset's latest event: " in line]
            if not deployed:
                say("nightly_deploy read no model event")
                return 1
            say(f"  nightly_deploy read the model event: {deployed[-1]}")
            return 0

        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=2, thread_name_prefix="demo-lane") as lanes:
            running = [lanes.submit(h100_lane), lanes.submit(a100_lane)]
            errors = [lane.exception() for lane in running]  # waits for both
        if any(errors):
            print("\n" + "\n".join(summary.lines(time.monotonic() - started)), flush=True)
            raise next(error for error in errors if error is not None)
        if any(lane.result() != 0 for lane in running):
            return 1

        jobs = list(client.list_custom_jobs(filter='labels.managed-by="airflow-gpu-sched"'))
        print("\n  training task (emulated minutes)             strategy             jobs      queued     ran        "
              "GPU-hours")
        tasks = dict.fromkeys(((j.labels or {}).get("airflow-dag", ""), (j.labels or {}).get("airflow-task", ""))
                              for j in reversed(jobs)  # oldest first; a tuning task's jobs are its trials
                              if not (j.labels or {}).get("airflow-dag", "").startswith("race_training"))  # above
        # the DAGs in the demo's order (the lanes ran side by side), a DAG's tasks oldest first
        tasks = dict.fromkeys(sorted(tasks, key=lambda task: DEMO_DAGS.index(task[0]) if task[0] in DEMO_DAGS
                                     else len(DEMO_DAGS)))
        for dag_id, task_id in tasks:
            mine = [j for j in jobs if (j.labels or {}).get("airflow-dag") == dag_id
                    and (j.labels or {}).get("airflow-task") == task_id]
            running = {j.name: _first_running(control.history(j.name)) for j in mine}  # never startTime
            queued = sum(((running[j.name] or j.end_time) - j.create_time).total_seconds() for j in mine
                         if running[j.name] or j.end_time) / 60
            ran = sum((j.end_time - running[j.name]).total_seconds() for j in mine
                      if running[j.name] and j.end_time) / 60
            gpus = sum((p.machine_spec.accelerator_count or 0) * p.replicas
                       for j in mine[:1] for _, p in j.job_spec.active_pools())
            strategy = "PERSISTENT_RESOURCE" if mine and mine[0].job_spec.persistent_resource_id else (
                mine[0].job_spec.strategy.value if mine else "-")
            task = f"{dag_id}.{task_id}"
            print(f"  {task:44} {strategy:20} {len(mine):8}  {queued:6.1f} min {ran:6.1f} min {gpus * ran / 60:9.3f}")

        resumed = [line for path in sorted((out / "vertex" / "logs").glob("*.log"))
                   for line in path.read_text().splitlines() if line.startswith("resuming from step")]
        steps = [int(line.rsplit(" ", 1)[-1]) for line in resumed]
        if not steps or max(steps) <= 0:
            print("the SPOT training never resumed from a checkpoint")
            return 1
        print(f"\n  checkpoint/resume: the SPOT training script resumed {len(steps)} times, last from step "
              f"{steps[-1]} (logs in {out / 'vertex' / 'logs'})")
        streamed = [line.split("] ", 1)[1].split(" [airflow_gpu_sched", 1)[0] for line in
                    (home / "spot_training.log").read_text().splitlines() if "] [workerpool0-0 " in line]
        print(f"  in the Airflow task log (stream_logs): {len(streamed)} of the script's lines, e.g. "
              f"{'; '.join(streamed[1:3])}")

        from airflow_gpu_sched.emulator.dashboard import render
        from airflow_gpu_sched.emulator.nights import nights
        from airflow_gpu_sched.drawing.timeline_svg import svg

        (out / "timeline.svg").write_text(svg(nights(emulator.backend), "airflow-gpu-sched demo"))
        (out / "dashboard.html").write_text(render(emulator.backend, refresh_seconds=3600))
        print("\n" + "\n".join(summary.lines(time.monotonic() - started)))
        print(f"  timeline: {out / 'timeline.svg'}   dashboard snapshot: {out / 'dashboard.html'}")
        print(f"  Airflow logs: {home}/*.log")
        return 0


RACE_REGIONS = ("us-central1", "us-east4", "us-west1")  # dags_examples/race_training.py's members


def _race_capacity(control: EmulatorControl, clients: list, dag_id: str) -> None:
    """No FLEX_START H100s in the two FLEX_START regions for the whole run; SPOT H100s in the
    third free up 10 emulated minutes after the task's first job (watched from a thread: the
    ``airflow dags test`` start-up takes emulated hours at this speed)."""
    import threading

    for region in RACE_REGIONS[:2]:
        control.set_capacity(region, "NVIDIA_H100_80GB", flex_start=0)
    control.set_capacity(RACE_REGIONS[2], "NVIDIA_H100_80GB", spot=0)

    def free_spot_after_the_first_job() -> None:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            if any(True for c in clients for _ in c.list_custom_jobs(filter=f'labels.airflow-dag="{dag_id}"')):
                control.set_capacity(RACE_REGIONS[2], "NVIDIA_H100_80GB", spot=8, at_seconds=600)
                return
            time.sleep(0.1)

    threading.Thread(target=free_spot_after_the_first_job, daemon=True).start()


def _race_demo(control: EmulatorControl, url: str, dags_test, say=print) -> int:
    """The race example and the same plan in sequence, each under the same scarce capacity:
    the winner, the cancelled others, and the time to GPUs of each."""
    clients = [VertexClient(location=region, project=PROJECT, api_endpoint=url) for region in RACE_REGIONS]
    to_gpus: dict[str, float] = {}
    for dag_id, story in (("race_training", "a race: FLEX_START in us-central1 and us-east4, SPOT in us-west1, "
                                            "all at once (SPOT GPUs free up after 10 emulated minutes)"),
                          ("race_training_sequential", "the same plan in sequence, under the same capacity")):
        _race_capacity(control, clients, dag_id)
        dags_test(dag_id, story)
        jobs = sorted((j for c in clients for j in c.list_custom_jobs(filter=f'labels.airflow-dag="{dag_id}"')),
                      key=lambda j: j.create_time)
        if not jobs:
            say(f"{dag_id} made no job")
            return 1
        first = jobs[0].create_time
        block = []  # said whole: the other lane's lines come before or after it
        for job in jobs:
            region, state = job.name.split("/")[3], job.state.value.removeprefix("JOB_STATE_")
            running = _first_running(control.history(job.name))  # never startTime: set at admission
            got = f", RUNNING after {(running - first).total_seconds() / 60:.1f} min" if running else ""
            role = "won" if state == "SUCCEEDED" else "cancelled" if state == "CANCELLED" else state.lower()
            block.append(f"  {dag_id}: {job.job_spec.strategy.value:10} {region:12} {state:10} ({role}{got})")
        say("\n".join(block))
        winner = next((j for j in jobs if j.state.value == "JOB_STATE_SUCCEEDED"), None)
        winner_running = _first_running(control.history(winner.name)) if winner is not None else None
        if winner is None or winner_running is None:
            say(f"{dag_id}: no job succeeded")
            return 1
        to_gpus[dag_id] = (winner_running - first).total_seconds() / 60
    race, sequential = to_gpus["race_training"], to_gpus["race_training_sequential"]
    say(f"\n  time to GPUs: race {race:.1f} min, in sequence {sequential:.1f} min: the race saved "
          f"{sequential - race:.1f} emulated minutes ({sequential / max(race, 1e-9):.1f}x sooner)")
    return 0


def _first_running(history: dict) -> datetime | None:
    """When a job first entered RUNNING, from the emulator's state history (None: never).
    Not ``startTime``: real Vertex (and the emulator by default) sets that at admission."""
    for entry in history.get("history", []):
        if entry.get("state") in ("JOB_STATE_RUNNING", "PIPELINE_STATE_RUNNING"):
            return datetime.fromisoformat(entry["time"])
    return None
