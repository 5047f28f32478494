"""Where the example DAGs send their jobs: environment variables, so the same DAGs run on the
bundled emulator (the defaults) and on real Vertex AI (set them and the connection)."""

import os

PROJECT_ID = os.environ.get("GPU_SCHED_PROJECT", "demo-project")
LOCATION = os.environ.get("GPU_SCHED_LOCATION", "us-central1")
BUCKET = os.environ.get("GPU_SCHED_BUCKET", "gs://demo-training-bucket")
IMAGE = os.environ.get("GPU_SCHED_IMAGE", "us-docker.pkg.dev/demo-project/training/trainer:latest")
SERVING_IMAGE = os.environ.get("GPU_SCHED_SERVING_IMAGE", "us-docker.pkg.dev/vertex-ai/prediction/pytorch-gpu.2-4:latest")
POLL_INTERVAL = float(os.environ.get("GPU_SCHED_POLL_INTERVAL", "30"))
# Emulated run time of the training jobs (the emulator reads EMULATOR_RUN_SECONDS; Vertex ignores it).
EMULATOR_ENV = {"EMULATOR_RUN_SECONDS": os.environ.get("GPU_SCHED_EMULATED_RUN_SECONDS", "1200")}
