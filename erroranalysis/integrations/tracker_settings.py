"""The trackers' settings checked before any work starts: each tracker installed, MLflow's tracking URI and store
reachable (its file store is refused by MLflow 3 unless MLFLOW_ALLOW_FILE_STORE=true), a W&B key present unless
W&B runs offline, a project name each tracker takes, the folder TensorBoard writes into, and a `--tracker-run`
that exists (MLflow) or has the right shape (W&B). Each problem is one line saying how to fix it."""

from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path
from urllib.parse import urlparse

from erroranalysis.core.errors import UserError

PACKAGES = {"mlflow": ("mlflow", "MLflow"), "wandb": ("wandb", "Weights & Biases"),
            "tensorboard": ("tensorboard", "TensorBoard")}
WANDB_OFFLINE = ("offline", "dryrun", "disabled")
WANDB_FORBIDDEN = re.compile(r"[/\\#?%:]")  # characters W&B refuses in a project name
WANDB_RUN_PATH = re.compile(r"^(?:(?:[\w.\-]+/)?[\w.\-]+/)?[\w\-]+$")  # [entity/][project/]run_id


def check(log_to, project: str, log_dir: str | None, tracker_run: str | None) -> None:
    """Refuse settings the trackers named in `log_to` would refuse later, after the work."""
    trackers = list(dict.fromkeys(log_to))
    if tracker_run is not None and len(trackers) != 1:
        raise UserError(f"--tracker-run {tracker_run} names a run of one tracker; give exactly one --log-to (got "
                        f"{', '.join(trackers) or 'none'}).")
    for name in trackers:
        module, title = PACKAGES[name]
        if importlib.util.find_spec(module) is None:
            raise UserError(f"--log-to {name} needs {title}: pip install 'erroranalysis-ml[{name}]'.")
    for name in trackers:
        {"mlflow": check_mlflow, "wandb": check_wandb, "tensorboard": check_tensorboard}[name](
            project, log_dir, tracker_run)


def _first_line(exc: Exception) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def check_mlflow(project: str, log_dir, tracker_run: str | None) -> None:
    import mlflow
    from mlflow.tracking import MlflowClient

    uri = mlflow.get_tracking_uri()
    scheme = urlparse(uri).scheme
    if scheme in ("", "file") and os.environ.get("MLFLOW_ALLOW_FILE_STORE", "").lower() not in ("true", "1"):
        raise UserError(f"--log-to mlflow: the tracking URI {uri} is MLflow's file store, which MLflow 3 refuses; "
                        "set MLFLOW_TRACKING_URI=sqlite:///mlflow.db (or http://HOST:PORT of a tracking server), "
                        "or MLFLOW_ALLOW_FILE_STORE=true.")
    if scheme.startswith(("sqlite", "postgresql", "mysql", "mssql")) and importlib.util.find_spec("sqlalchemy") is None:
        raise UserError(f"--log-to mlflow: the tracking URI {uri} is a database, which MLflow reads with "
                        "SQLAlchemy: pip install sqlalchemy alembic (or the full mlflow package).")
    retries = os.environ.get("MLFLOW_HTTP_REQUEST_MAX_RETRIES")
    if retries is None:  # a server that is down answers at once, not after MLflow's minutes of backoff
        os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] = "1"
    try:
        client = MlflowClient()
        if tracker_run is None:
            client.get_experiment_by_name(project)
            return
        run = client.get_run(tracker_run)
    except Exception as exc:  # any store error: one line, before the work
        what = f"run {tracker_run}" if tracker_run else "the tracking store"
        raise UserError(f"--log-to mlflow: {what} at {uri} cannot be reached: {_first_line(exc)}") from None
    finally:
        if retries is None:
            os.environ.pop("MLFLOW_HTTP_REQUEST_MAX_RETRIES", None)
    if run.info.lifecycle_stage == "deleted":
        raise UserError(f"--tracker-run {tracker_run}: that MLflow run at {uri} is deleted; restore it or give "
                        "another run id.")


def check_wandb(project: str, log_dir, tracker_run: str | None) -> None:
    if WANDB_FORBIDDEN.search(project) or len(project) > 128:
        raise UserError(f"--log-project {project!r}: W&B project names take at most 128 characters and none of "
                        "/ \\ # ? % :")
    if tracker_run is not None and not WANDB_RUN_PATH.match(tracker_run):
        raise UserError(f"--tracker-run {tracker_run!r}: a W&B run path is entity/project/run_id (or "
                        "project/run_id, or run_id), as the run's page shows it.")
    if os.environ.get("WANDB_MODE", "").lower() in WANDB_OFFLINE:
        return
    if not wandb_credentials():
        raise UserError("--log-to wandb: no W&B API key (WANDB_API_KEY, or `wandb login`'s netrc entry for "
                        f"{wandb_host()}); log in, or set WANDB_MODE=offline to write local files.")


def wandb_host() -> str:
    return urlparse(os.environ.get("WANDB_BASE_URL") or "https://api.wandb.ai").hostname or "api.wandb.ai"


def wandb_credentials() -> bool:
    """An API key W&B would find: the environment, an identity token file, or a netrc entry for its host."""
    if os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_IDENTITY_TOKEN_FILE"):
        return True
    import netrc

    path = os.environ.get("NETRC") or os.path.expanduser("~/.netrc")
    try:
        return netrc.netrc(path).authenticators(wandb_host()) is not None
    except (OSError, netrc.NetrcParseError):
        return False


def check_tensorboard(project: str, log_dir: str | None, tracker_run: str | None) -> None:
    folder = Path(log_dir or "tensorboard")
    if tracker_run is not None and (Path(tracker_run).name != tracker_run or tracker_run in (".", "..")):
        raise UserError(f"--tracker-run {tracker_run!r}: with --log-to tensorboard, the name of a run's folder "
                        f"under --log-dir {folder} (no path separators).")
    existing = next((p for p in (folder, *folder.absolute().parents) if p.exists()), None)
    if existing is not None and (not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK)):
        raise UserError(f"--log-dir {folder}: {existing} is not a folder this user can write; give another "
                        "--log-dir.")
