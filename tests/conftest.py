"""Shared fixtures: one emulator (a real HTTP server) per test session, reset for every test."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from airflow_gpu_sched.emulator import EmulatorServer
from airflow_gpu_sched.emulator.control import EmulatorControl

DATA = Path(__file__).parent / "data"
PROJECT, LOCATION = "test-project", "us-central1"


@pytest.fixture(scope="session")
def emulator_server():
    with EmulatorServer() as server:
        yield server


@pytest.fixture
def emulator(emulator_server) -> EmulatorControl:
    """A fresh emulator at speed 1: tests move emulated time with ``emulator.advance(s)``."""
    control = EmulatorControl(emulator_server.url)
    control.reset({"seed": 7, "speed": 1})
    return control


@pytest.fixture
def parent() -> str:
    return f"projects/{PROJECT}/locations/{LOCATION}"


def load_seed(name: str) -> dict:
    return json.loads((DATA / name).read_text())
