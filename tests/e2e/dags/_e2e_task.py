"""What every e2e training task shares: one A100 on FLEX_START in the e2e project, 1-second polls.

A plain module next to the DAG files (copied with them; the DAGs folder is on ``sys.path``)."""

E2E_TRAINING = dict(
    project_id="e2e-project",
    location="us-central1",
    image_uri="us-docker.pkg.dev/e2e-project/training/trainer:latest",
    machine_type="a2-highgpu-1g",
    accelerator_type="NVIDIA_TESLA_A100",
    accelerator_count=1,
    max_wait_duration="1h",
    poll_interval=1,
)
