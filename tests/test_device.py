"""The device is decided in one place (ablate.device): training, sampling, evaluation and the precision agree."""

import torch

from ablate.device import device, precision


def test_accelerator_cpu_keeps_the_whole_run_on_the_cpu_even_with_a_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert device({"accelerator": "cpu", "precision": "auto"}) == "cpu"
    assert precision({"accelerator": "cpu", "precision": "auto"}) == "32-true"
    assert device({"accelerator": "auto", "precision": "auto"}) == "cuda"
    assert precision({"accelerator": "gpu", "precision": "auto"}) == "bf16-mixed"
    assert precision({"accelerator": "gpu", "precision": "16-mixed"}) == "16-mixed"


def test_without_a_gpu_everything_is_on_the_cpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert device({"accelerator": "auto", "precision": "auto"}) == "cpu"
    assert precision({"accelerator": "auto", "precision": "auto"}) == "32-true"
