"""What the client and the store share: answers and jobs as plain Python."""
import dataclasses
from typing import Dict, Optional

Problem = Dict[str, int]


@dataclasses.dataclass
class Best:
    """A best configuration. `match` says how it was found: "exact",
    "nearest_problem" or "same_architecture"; `tuning_job_id` (from a
    daemon asked with tune_on_miss) is the job tuning the exact problem."""
    kernel: str
    key: str
    config: Dict[str, object]
    time_ms: float
    device: str
    architecture: str
    problem: Problem
    match: str = "exact"
    job_id: str = ""
    objective: str = "time"
    problem_distance: float = 0.0
    tuning_job_id: str = ""


@dataclasses.dataclass
class Job:
    """A tuning job as stored: its state ("queued", "running", "succeeded",
    "failed", "cancelled", "interrupted") and progress."""
    id: str
    kernel: str
    state: str
    device: str
    problem: Problem
    evaluations: int
    max_evaluations: int = 0
    strategy: str = ""
    message: str = ""
    client: str = ""
    best: Optional[Best] = None


class KtuneError(Exception):
    """A refused request or an unreachable daemon or store; the message
    says which, naming the field or the address."""
