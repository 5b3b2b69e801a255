"""logger=tensorboard / logger=mlflow: Lightning's own loggers next to the CSV log, which is always kept."""

import importlib.util

import pandas as pd
import pytest
from hydra import compose, initialize_config_dir

from ablate.config import CONF_DIR


def needs(module: str, extra: str):
    return pytest.mark.skipif(importlib.util.find_spec(module) is None,
                              reason=f"logger={extra} needs the {extra} extra: pip install -e '.[{extra}]'")


def smoke_cfg(*overrides):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=["experiment=smoke_rloo", "trainer.num_threads=1",
                                                        "eval.enabled=false", *overrides])


def test_mlflow_names_keep_at_and_hat_apart():
    from ablate.loggers import mlflow_name

    assert mlflow_name("val/pass@1") == "val/pass_at_1" and mlflow_name("pass^4") == "pass_hat_4"
    assert mlflow_name("train/reward_mean") == "train/reward_mean"


def test_the_default_logs_csv_only():
    from ablate.loggers import extra_loggers

    cfg = smoke_cfg()
    assert not cfg.logger.tensorboard and not cfg.logger.mlflow and extra_loggers(cfg, CONF_DIR) == []


@pytest.mark.slow
@needs("tensorboard", "tensorboard")
@needs("mlflow", "mlflow")
def test_tensorboard_and_mlflow_files_appear_next_to_the_csv(tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from ablate.run import run

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    run_dir = tmp_path / "run"
    run(smoke_cfg("logger=tensorboard", "logger.mlflow=true"), run_dir)
    csv = pd.read_csv(run_dir / "metrics.csv")
    assert csv["step"].tolist() == [0, 1, 2] and "train/reward_mean" in csv

    events = list((run_dir / "tensorboard").glob("events.out.tfevents.*"))
    assert len(events) == 1
    board = EventAccumulator(str(run_dir / "tensorboard"))
    board.Reload()
    scalars = board.Tags()["scalars"]
    assert {"train/reward_mean", "train/loss", "time/generate_s"} <= set(scalars)
    assert [e.step for e in board.Scalars("train/loss")] == [0, 1, 2]
    assert [e.value for e in board.Scalars("train/loss")] == pytest.approx(csv["train/loss"].tolist(), rel=1e-6)

    client = MlflowClient((run_dir / "mlruns").resolve().as_uri())
    (experiment,) = [e for e in client.search_experiments() if e.name == "ablate"]
    (mlrun,) = client.search_runs([experiment.experiment_id])
    assert mlrun.info.status == "FINISHED"
    history = client.get_metric_history(mlrun.info.run_id, "train/loss")
    assert [m.step for m in history] == [0, 1, 2]
    assert [m.value for m in history] == pytest.approx(csv["train/loss"].tolist(), rel=1e-6)
    assert mlrun.data.params["stage/name"] == "rloo" and mlrun.data.tags["run_dir"] == str(run_dir.resolve())


def test_a_missing_logger_package_is_a_config_error(monkeypatch):
    import ablate.checks as checks

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name.startswith(("tensorboard", "mlflow"))
                        else real(name, *a))
    for logger, extra in (("tensorboard", "tensorboard"), ("mlflow", "mlflow")):
        with pytest.raises(checks.ConfigError, match=rf"pip install -e '\.\[{extra}\]'"):
            checks.check_config(smoke_cfg(f"logger={logger}"))


def test_a_switched_on_logger_without_its_package_is_refused_naming_the_extra(monkeypatch):
    from omegaconf import OmegaConf

    from ablate.config import ConfigError
    from ablate.loggers import LOGGERS, check_loggers

    monkeypatch.setitem(LOGGERS, "fake", None)  # restored (removed) after the test
    LOGGERS.register("fake", modules=("no_such_module_for_ablate",), extra="fakeextra")(lambda cfg, run_dir, params: None)
    check_loggers(OmegaConf.create({"logger": {"fake": False}}))  # off: nothing asked
    with pytest.raises(ConfigError, match=r"logger=fake needs the fakeextra extra: pip install -e '\.\[fakeextra\]'"):
        check_loggers(OmegaConf.create({"logger": {"fake": True}}))
