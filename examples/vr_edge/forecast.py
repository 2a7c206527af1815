"""A small learned predictor of each user's next-step rate and the GPU's next-step capacity.

    python -m examples.vr_edge.forecast           # collect, fit, write rate_predictor.json

In the manner of a transfer-time predictor feeding a model-predictive controller: the data are
collected with `ParallelRolloutCollector` on the jittered *train* traces (the traces training
and baseline tuning see), under `JointExpectedReward` with its levels perturbed at random so the
data cover more choices than one controller makes. For each user measured at two consecutive
steps, the input is what the controller reads (`prediction_features`: the user's throughput
history in log space relative to its latest sample, its estimated rate with the air to itself,
the estimated airtime and GPU loads, its stream and queue) and the target is the change in log
rate the next observation shows; the network gives a mean and a log-std (a Gaussian negative
log-likelihood fit), so the controller knows how far to trust it. The GPU's capacity gets a
linear fit of its next log change on the current estimate and load.

On a variant of the env with late client reports (`report_delay_steps=d`), the throughput an
observation shows was measured `d` steps before it, so the step a controller is about to choose
for shows its rate `1 + d` observations later: the target is then the change over `1 + d`
observations (`lead_steps`), and the data come from that variant (`--report-delay-steps`,
`--report-noise`; `--output` should then name another file, since the default one serves
today's env). The GPU's capacity is read from the server's own render times, which are never
late, so its target stays one step ahead.

Inference is NumPy only (the weights are stored as JSON), so the controller that uses it needs
no torch.
"""

from __future__ import annotations

import argparse
import functools
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from examples.vr_edge.controller import DecodedObservation
from examples.vr_edge.joint_model import estimate_conditions
from examples.vr_edge.synthetic_env import MOTION_TO_PHOTON_BUDGET_MS, ObservationLayout, SyntheticVREdgeEnv
from examples.vr_edge.traces import TRAINING_TRACE_JITTER

__all__ = [
    "DEFAULT_PREDICTOR_PATH", "Forecast", "RatePredictor", "collect_transitions", "fit_predictor", "lead_pairs", "load_predictor",
]

DEFAULT_PREDICTOR_PATH = Path(__file__).with_name("rate_predictor.json")
_RATE_REFERENCE_MBPS = 300.0
_GPU_REFERENCE = 3.2
# Window of the rate estimate the predictor starts from (the newest sample).
_WINDOW = 1
# The spread a user without measurements is given: wide, so no controller trusts its rate.
_UNMEASURED_LOG_STD = float(np.log(0.3))


@dataclass
class Forecast:
    rate_mbps: np.ndarray
    rate_log_std: np.ndarray
    gpu_capacity: np.ndarray
    backlog_mbit: np.ndarray


def prediction_features(decoded: DecodedObservation) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """`(user_features [batch, users, f], gpu_features [batch, g], rate, capacity, backlog)`."""
    rate, capacity, backlog = estimate_conditions(decoded, _WINDOW)
    history = np.log(np.maximum(decoded.throughput_mbps, 1e-3))
    relative = np.clip(history[..., :-1] - history[..., -1:], -3.0, 3.0)
    last = decoded.last_level[..., None]
    last_bitrate = np.take_along_axis(decoded.bitrate, last, axis=-1)[..., 0]
    airtime_share = np.clip(last_bitrate / np.maximum(rate, 1e-6), 0.0, 3.0)
    air_load = np.where(decoded.active & decoded.measured, airtime_share, 0.0).sum(axis=-1, keepdims=True)
    count = decoded.active.mean(axis=-1, keepdims=True)
    gpu_log = np.log(capacity / _GPU_REFERENCE)[:, None]
    users = decoded.active.shape[-1]
    user_features = np.concatenate(
        [
            relative,
            np.log(rate / _RATE_REFERENCE_MBPS)[..., None],
            airtime_share[..., None],
            np.repeat(air_load, users, axis=-1)[..., None],
            np.repeat(count, users, axis=-1)[..., None],
            np.repeat(gpu_log, users, axis=-1)[..., None],
            (decoded.frame_rate / 72.0)[..., None],
            (decoded.last_level / 5.0)[..., None],
            (decoded.queue_ms / MOTION_TO_PHOTON_BUDGET_MS)[..., None],
            decoded.drop_rate[..., None],
            decoded.late_rate[..., None],
        ],
        axis=-1,
    )
    gpu_features = np.concatenate([np.ones_like(gpu_log), gpu_log, count], axis=-1)
    return user_features, gpu_features, rate, capacity, backlog


def _mlp_forward(weights: list[tuple[np.ndarray, np.ndarray]], inputs: np.ndarray) -> np.ndarray:
    hidden = inputs
    for index, (weight, bias) in enumerate(weights):
        hidden = hidden @ weight.T + bias
        if index < len(weights) - 1:
            hidden = np.tanh(hidden)
    return hidden


class RatePredictor:
    """Next-step log rate change per user (mean and log-std) and next-step GPU capacity."""

    def __init__(self, state: dict[str, Any]) -> None:
        self.state = state
        self.mean = np.asarray(state["feature_mean"])
        self.scale = np.asarray(state["feature_scale"])
        self.layers = [(np.asarray(layer["weight"]), np.asarray(layer["bias"])) for layer in state["layers"]]
        self.gpu_coefficients = np.asarray(state["gpu_coefficients"])
        self.gpu_log_std = float(state["gpu_log_std"])

    def predict(self, decoded: DecodedObservation) -> Forecast:
        user_features, gpu_features, rate, capacity, backlog = prediction_features(decoded)
        change, log_std = self._rate_change(decoded, user_features)
        predicted_rate = rate * np.exp(change)
        predicted_capacity = capacity * np.exp(np.clip(gpu_features @ self.gpu_coefficients, -1.0, 1.0))
        return Forecast(predicted_rate, np.exp(log_std), predicted_capacity, backlog)

    def rate_change(self, decoded: DecodedObservation) -> tuple[np.ndarray, np.ndarray]:
        """`(change, log_std)`, each `[batch, users]`: the predicted log rate change over the
        predictor's lead (clipped to [-2, 2]) and the log of its spread. A user not measured yet
        gets no change and the default spread of 0.3."""
        return self._rate_change(decoded, prediction_features(decoded)[0])

    def _rate_change(self, decoded: DecodedObservation, user_features: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        output = _mlp_forward(self.layers, (user_features - self.mean) / self.scale)
        eligible = decoded.active & decoded.measured
        change = np.where(eligible, np.clip(output[..., 0], -2.0, 2.0), 0.0)
        log_std = np.where(eligible, np.clip(output[..., 1], -5.0, 1.0), _UNMEASURED_LOG_STD)
        return change, log_std


def load_predictor(path: str | Path = DEFAULT_PREDICTOR_PATH) -> RatePredictor:
    return RatePredictor(json.loads(Path(path).read_text()))


class _ExploringController:
    """`JointExpectedReward`'s levels, each moved one level up or down with probability `epsilon`."""

    def __init__(self, layout: ObservationLayout, seed: int, epsilon: float = 0.3) -> None:
        from examples.vr_edge.joint_control import JointExpectedReward

        self.controller = JointExpectedReward(layout)
        self.rng = np.random.default_rng(seed)
        self.epsilon = epsilon
        self.top = layout.num_levels - 1

    def __call__(self, observations: np.ndarray) -> np.ndarray:
        levels = self.controller(observations)
        moves = self.rng.choice([-1, 0, 1], size=levels.shape, p=[self.epsilon / 2, 1 - self.epsilon, self.epsilon / 2])
        return np.clip(levels + moves, 0, self.top)


def collect_transitions(
    num_envs: int = 16,
    steps: int = 400,
    seed: int = 0,
    num_users: int = 8,
    trace_jitter: float = TRAINING_TRACE_JITTER,
    env_options: dict[str, Any] | None = None,
    lead_steps: int = 1,
) -> dict[str, np.ndarray]:
    """Inputs and targets from one rollout of `num_envs` x `steps` on the jittered train traces.

    `env_options` are the env's variant options (e.g. `report_delay_steps`); a user's target is
    its log rate change from an observation to the one `lead_steps` later, within one episode
    and measured at both.
    """
    from parallel_rollouts import ParallelRolloutCollector

    if isinstance(lead_steps, bool) or not isinstance(lead_steps, int) or not 1 <= lead_steps < steps:
        raise ValueError(f"`lead_steps` must be an int in [1, steps={steps}); got {lead_steps!r}.")
    env_fn = functools.partial(
        SyntheticVREdgeEnv, num_users=num_users, traces="train", trace_jitter=trace_jitter, **(env_options or {})
    )
    layout = ObservationLayout(num_users)
    with ParallelRolloutCollector(
        [env_fn] * num_envs, _ExploringController(layout, seed), backend="sync", horizon=steps, seed=seed
    ) as collector:
        batch = collector.collect()
    observations = batch.observations.reshape(steps * num_envs, layout.size)
    model_decoded = DecodedObservation(layout, observations, _stream_model())
    user_features, gpu_features, rate, capacity, _ = prediction_features(model_decoded)
    shape = (steps, num_envs)
    user_features = user_features.reshape(*shape, num_users, -1)
    gpu_features = gpu_features.reshape(*shape, -1)
    rate, capacity = rate.reshape(*shape, num_users), capacity.reshape(*shape)
    eligible = (model_decoded.active & model_decoded.measured).reshape(*shape, num_users)
    ends = batch.terminations | batch.truncations
    pairs = lead_pairs(ends, eligible, lead_steps)
    continues = ~ends[:-1]
    return {
        "user_inputs": user_features[:-lead_steps][pairs],
        "user_targets": np.log(rate[lead_steps:] / rate[:-lead_steps])[pairs],
        "gpu_inputs": gpu_features[:-1][continues],
        "gpu_targets": np.log(capacity[1:] / capacity[:-1])[continues],
    }


def lead_pairs(ends: np.ndarray, eligible: np.ndarray, lead_steps: int) -> np.ndarray:
    """`[steps - lead_steps, envs, users]`: whether step `t` and step `t + lead_steps` of an env are
    one episode (`ends [steps, envs]`, an episode ending at a step) with the user measured at both
    (`eligible [steps, envs, users]`)."""
    steps = ends.shape[0]
    crossed = np.zeros((steps - lead_steps, *ends.shape[1:]), dtype=bool)
    for offset in range(lead_steps):
        crossed |= ends[offset : steps - lead_steps + offset]
    return ~crossed[..., None] & eligible[:-lead_steps] & eligible[lead_steps:]


def _stream_model():
    from examples.vr_edge.synthetic_env import StreamModel

    return StreamModel()


def fit_predictor(data: dict[str, np.ndarray], seed: int = 0, hidden: int = 32, epochs: int = 20) -> dict[str, Any]:
    """Fit the rate network (Gaussian NLL, Adam) and the GPU's linear model; return the JSON state."""
    import torch

    # One thread: the same fit bit for bit, and no idle worker spinning on a busy machine.
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    inputs = data["user_inputs"]
    mean, scale = inputs.mean(axis=0), inputs.std(axis=0) + 1e-6
    x = torch.as_tensor((inputs - mean) / scale, dtype=torch.float32)
    y = torch.as_tensor(data["user_targets"], dtype=torch.float32)
    network = torch.nn.Sequential(
        torch.nn.Linear(x.shape[1], hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, hidden), torch.nn.Tanh(),
        torch.nn.Linear(hidden, 2),
    )
    optimizer = torch.optim.Adam(network.parameters(), lr=3e-3)
    order_rng = np.random.default_rng(seed)
    for _ in range(epochs):
        for batch in np.array_split(order_rng.permutation(len(x)), max(1, len(x) // 512)):
            index = torch.as_tensor(batch)
            output = network(x[index])
            predicted, log_std = output[:, 0], output[:, 1].clamp(-5.0, 1.0)
            loss = (0.5 * ((y[index] - predicted) / log_std.exp()) ** 2 + log_std).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    with torch.no_grad():
        output = network(x)
        nll = float((0.5 * ((y - output[:, 0]) / output[:, 1].clamp(-5, 1).exp()) ** 2 + output[:, 1].clamp(-5, 1)).mean())
        mse = float(((y - output[:, 0]) ** 2).mean())
    coefficients, *_ = np.linalg.lstsq(data["gpu_inputs"], data["gpu_targets"], rcond=None)
    residual = data["gpu_targets"] - data["gpu_inputs"] @ coefficients
    layers = [module for module in network if isinstance(module, torch.nn.Linear)]
    return {
        "feature_mean": mean.tolist(),
        "feature_scale": scale.tolist(),
        "layers": [{"weight": layer.weight.detach().numpy().tolist(), "bias": layer.bias.detach().numpy().tolist()} for layer in layers],
        "gpu_coefficients": coefficients.tolist(),
        "gpu_log_std": float(residual.std()),
        "fit": {
            "samples": int(len(x)),
            "train_nll": nll,
            "train_mse_log_rate": mse,
            "variance_log_rate_change": float(y.var()),
            "gpu_samples": int(len(residual)),
        },
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description="Fit the rate predictor on data collected from the train traces.")
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--steps", type=int, default=400, help="steps per env in the one rollout collected")
    parser.add_argument("--seed", type=int, default=0, help="collector, exploration and fitting seed")
    parser.add_argument("--output", default=str(DEFAULT_PREDICTOR_PATH))
    parser.add_argument(
        "--report-delay-steps", type=int, default=0,
        help="collect on the env variant whose client reports arrive this many steps late (0: today's env)",
    )
    parser.add_argument("--report-noise", type=float, default=0.0, help="collect on the variant with this report noise")
    parser.add_argument(
        "--lead-steps", type=int, default=None,
        help="observations between input and target (default: 1 + --report-delay-steps, the step a choice is for)",
    )
    args = parser.parse_args(argv)
    if args.report_delay_steps < 0 or not args.report_noise >= 0:
        parser.error(
            f"--report-delay-steps and --report-noise must be >= 0; got {args.report_delay_steps} and {args.report_noise}."
        )
    lead_steps = 1 + args.report_delay_steps if args.lead_steps is None else args.lead_steps
    # Only the options that differ from today's env, so a fit on today's env records none.
    env_options = {
        name: value for name, value in (("report_delay_steps", args.report_delay_steps), ("report_noise", args.report_noise))
        if value
    }
    started = time.perf_counter()
    data = collect_transitions(args.num_envs, args.steps, args.seed, env_options=env_options, lead_steps=lead_steps)
    state = fit_predictor(data, args.seed)
    state["fit"].update({
        "num_envs": args.num_envs, "steps": args.steps, "seed": args.seed, "seconds": time.perf_counter() - started,
        **({"env_options": env_options, "lead_steps": lead_steps} if env_options or lead_steps != 1 else {}),
    })
    Path(args.output).write_text(json.dumps(state) + "\n")
    print(json.dumps(state["fit"], indent=2))
    print(f"wrote {args.output}")
    return state


if __name__ == "__main__":
    main()
