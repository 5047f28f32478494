"""Nightly retraining: prepare the data, train on FLEX_START (DWS) GPUs, evaluate.

The training job waits (deferred, no worker slot held) until all 8 H100s are free at once,
for at most 2 hours. If they never come, the plan falls back: FLEX_START in a second region,
then Spot VMs (resuming from the same checkpoints), and the whole plan must finish within
8 hours of the data interval's end, so it never runs into the working day. The evaluation
reads the training task's figures (wait, run, GPU-hours, cost) from XCom.

``nightly_retraining_tuned`` is the variant for teams that tune every night and must end with a
registered model: a hyperparameter tuning job (4 trials, 2 at a time, each a FLEX_START custom
job on one A100) picks the learning rate, then a training pipeline trains with the best trial's
parameters (FLEX_START, falling back to SPOT) and registers a new version of the model.
"""

from __future__ import annotations

import json
import os
import tempfile
from datetime import datetime, timedelta
from pathlib import Path

from airflow.sdk import DAG, task

from _settings import BUCKET, EMULATOR_ENV, IMAGE, LOCATION, POLL_INTERVAL, PROJECT_ID, SERVING_IMAGE
from airflow_gpu_sched.operators import FlexStartTrainingOperator


def _email_on_fallback() -> list:
    """Airflow's SMTP notifier (apache-airflow-providers-smtp, which comes with Airflow) mails the
    team when the plan falls back; set GPU_SCHED_NOTIFY_EMAIL (and the ``smtp_default``
    connection) to turn it on. Its templates see the task's context and ``gpu_sched``, the record."""
    to = os.environ.get("GPU_SCHED_NOTIFY_EMAIL")
    try:
        from airflow.providers.smtp.notifications.smtp import SmtpNotifier
    except ImportError:  # the example still parses without the provider
        return []
    if not to:
        return []
    return [SmtpNotifier(to=to, subject="{{ ti.task_id }} fell back from {{ gpu_sched['from'] }} to "
                                        "{{ gpu_sched['to'] }} in {{ gpu_sched.to_location }}",
                         html_content="{{ gpu_sched.reason }}")]

with DAG(
    dag_id="nightly_retraining",
    schedule="@daily",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["gpu-training", "example"],
    doc_md=__doc__,
):

    @task
    def prepare_data(ds: str | None = None) -> str:
        """Write the day's dataset and return where it is (a gs:// path in production)."""
        folder = Path(os.environ.get("GPU_SCHED_DATA_DIR", tempfile.gettempdir())) / "nightly" / (ds or "manual")
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / "train.jsonl"
        path.write_text("\n".join(json.dumps({"x": i, "y": 2 * i + 1}) for i in range(1000)))
        return str(path)

    train = FlexStartTrainingOperator(
        task_id="train",
        project_id=PROJECT_ID,
        location=LOCATION,
        display_name="nightly-retraining-{{ ds_nodash }}",
        image_uri=IMAGE,
        command=["python", "train.py"],
        args=["--data={{ ti.xcom_pull(task_ids='prepare_data') }}", "--steps=200"],
        env=EMULATOR_ENV,
        machine_type="a3-highgpu-8g",
        accelerator_type="NVIDIA_H100_80GB",
        accelerator_count=8,
        max_wait_duration="2h",
        fallback=[
            {"strategy": "FLEX_START", "max_wait_duration": "1h", "locations": ["us-east4"]},
            {"strategy": "SPOT", "max_preemption_retries": 2},
        ],
        deadline=timedelta(hours=8),
        expected_run_time="1h",
        timeout="6h",
        base_output_dir=BUCKET + "/nightly/{{ ds_nodash }}",
        labels={"team": "ml-platform", "pipeline": "nightly-retraining"},
        poll_interval=POLL_INTERVAL,
        on_fallback=_email_on_fallback(),
    )

    @task
    def evaluate(training: dict) -> dict:
        """Report what the night cost: waiting, running, GPU-hours."""
        print(f"trained {training['job_name']} ({training['strategy']}): state {training['state']}, "
              f"queued {training['queued_seconds'] / 60:.1f} min, ran {training['run_seconds'] / 60:.1f} min, "
              f"{training['gpu_hours']:.2f} GPU-hours over {len(training['attempts'])} attempt(s)"
              + (f", {training['cost']:.2f} {training['currency']}" if training["cost"] is not None else ""))
        return {"model_dir": f"{training['base_output_dir']}/model/", "gpu_hours": training["gpu_hours"]}

    prepare_data() >> train
    evaluate(train.output)


STUDY = {
    "metrics": [{"metricId": "accuracy", "goal": "MAXIMIZE"}],
    "parameters": [{"parameterId": "learning_rate", "scaleType": "UNIT_LOG_SCALE",
                    "doubleValueSpec": {"minValue": 0.0001, "maxValue": 0.1}}],
    "algorithm": "RANDOM_SEARCH",
}
A100 = {"machine_type": "a2-highgpu-1g", "accelerator_type": "NVIDIA_TESLA_A100", "accelerator_count": 1}

with DAG(
    dag_id="nightly_retraining_tuned",
    schedule="@daily",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["gpu-training", "example"],
    doc_md=__doc__,
):

    @task
    def prepare_tuning_data(ds: str | None = None) -> str:
        return f"{BUCKET}/nightly-tuned/{ds or 'manual'}/train.jsonl"

    tune = FlexStartTrainingOperator(
        task_id="tune",
        project_id=PROJECT_ID,
        location=LOCATION,
        display_name="nightly-tuning-{{ ds_nodash }}",
        job_type="hyperparameter_tuning_job",
        study_spec=STUDY,
        max_trial_count=4,
        parallel_trial_count=2,
        image_uri=IMAGE,
        command=["python", "train.py"],
        args=["--data={{ ti.xcom_pull(task_ids='prepare_tuning_data') }}", "--steps=50"],
        env=EMULATOR_ENV,
        max_wait_duration="1h",
        base_output_dir=BUCKET + "/nightly-tuned/{{ ds_nodash }}/tuning",
        poll_interval=POLL_INTERVAL,
        **A100,
    )

    train_and_register = FlexStartTrainingOperator(
        task_id="train_and_register",
        project_id=PROJECT_ID,
        location=LOCATION,
        display_name="nightly-model-{{ ds_nodash }}",
        job_type="training_pipeline",
        model_display_name="nightly-model",
        model_serving_image_uri=SERVING_IMAGE,
        image_uri=IMAGE,
        command=["python", "train.py"],
        args=["--data={{ ti.xcom_pull(task_ids='prepare_tuning_data') }}", "--steps=200",
              "--learning_rate={{ ti.xcom_pull(task_ids='tune')['best_trial']['parameters']['learning_rate'] }}"],
        env=EMULATOR_ENV,
        max_wait_duration="1h",
        fallback=[{"strategy": "SPOT", "max_preemption_retries": 2}],
        base_output_dir=BUCKET + "/nightly-tuned/{{ ds_nodash }}/final",
        poll_interval=POLL_INTERVAL,
        **A100,
    )

    @task
    def report(tuning: dict, training: dict) -> dict:
        """What the night tuned, registered and spent."""
        best = tuning["best_trial"]
        print(f"best of {len(tuning['trials'])} trials: {best['parameters']} -> {best['final_measurement']}; "
              f"registered {training['model_name']} version {training['model_version']}; "
              f"{tuning['gpu_hours'] + training['gpu_hours']:.2f} GPU-hours in all")
        return {"model_name": training["model_name"], "model_version": training["model_version"],
                "best_parameters": best["parameters"]}

    prepare_tuning_data() >> tune >> train_and_register
    report(tune.output, train_and_register.output)
