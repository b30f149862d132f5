"""Settings of a Flower run, parsed once from Flower's run config (``[tool.flwr.app.config]``).

``flwr run . CONN --run-config 'scenario="runs/x/scenario.yaml" timeout=60.0'`` overrides any of
them; ``run_simulation`` passes an empty run config, so every key has a default.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from server.kafka.settings import ConsumerSettings
from simulator.errors import ConfigError

__all__ = ["APP_DIR", "ConsumerSettings", "FleetSettings", "RunSettings"]

APP_DIR = Path(__file__).resolve().parents[2]


class FleetSettings(BaseModel):
    """How the server talks to its clients."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    timeout: float = Field(default=120.0, gt=0, description="seconds to wait for head replies")
    train_timeout: float = Field(
        default=600.0, gt=0, description="seconds to wait for a FedAvg round or the setup"
    )
    retries: int = Field(default=1, ge=0, description="extra attempts of repeatable messages")
    poll_interval: float = Field(
        default=0.2, gt=0, description="longest pause between reply pulls (they start at 0.01 s)"
    )
    node_wait: float = Field(default=120.0, gt=0, description="seconds to wait for SuperNodes")


class RunSettings(BaseModel):
    """The ServerApp's run config: which scenario, where outputs go, fleet and stream settings."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    scenario: str = "scenarios/federation_tiny.yaml"
    output_dir: str = ""
    transport: Literal["auto", "flower-sim", "flower-deploy"] = "auto"
    plots: bool = True
    fleet: FleetSettings = FleetSettings()
    kafka: ConsumerSettings = ConsumerSettings()

    @classmethod
    def from_run_config(cls, run_config: Mapping[str, Any]) -> RunSettings:
        """Parse Flower's run config (keys use dashes: ``train-timeout``, ``kafka-bootstrap``)."""
        values = {k.replace("-", "_"): v for k, v in run_config.items()}
        fleet_keys = set(FleetSettings.model_fields)
        fleet = {k: v for k, v in values.items() if k in fleet_keys}
        kafka = {k[6:]: v for k, v in values.items() if k.startswith("kafka_")}
        top = {k: v for k, v in values.items() if k not in fleet_keys and k[:6] != "kafka_"}
        try:
            return cls(**top, fleet=FleetSettings(**fleet), kafka=ConsumerSettings(**kafka))
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]).replace("_", "-")
            raise ConfigError(first["msg"], f"run-config {where}") from None

    def to_run_config(self) -> dict[str, Any]:
        """The flat run-config keys (dashes) that :meth:`from_run_config` reads back."""
        values: dict[str, Any] = self.model_dump(exclude={"fleet", "kafka"})
        values.update(self.fleet.model_dump())
        values.update({f"kafka_{k}": v for k, v in self.kafka.model_dump().items()})
        return {k.replace("_", "-"): v for k, v in values.items()}

    def scenario_path(self) -> Path:
        """The scenario file: as given, or relative to the app directory."""
        path = Path(self.scenario).expanduser()
        if path.is_absolute() or path.exists():
            return path
        return APP_DIR / path
