"""``events`` take their phase from the phase span open while they ran, on any thread
(harness/run/rank/recorders/events.py). On CUDA, backward's hooks run on the autograd engine's device
thread while the loop's thread holds ``HARNESS::phase backward`` open; on CPU both are one thread,
so the CUDA case is emulated with profiler events of two thread ids."""

from __future__ import annotations

from dataclasses import dataclass

from torch.autograd import DeviceType

from harness.run.rank.recorders.attribution import profiler_spans
from harness.run.rank.recorders.events import events_from_profiler

LOOP, DEVICE = 1, 2  # the loop's thread; the autograd engine's CUDA device thread


@dataclass
class Event:  # the part of a kineto event that events_from_profiler reads
    label: str
    start: int
    end: int
    tid: int
    device: DeviceType = DeviceType.CPU

    def name(self) -> str:
        return self.label

    def start_ns(self) -> int:
        return self.start

    def end_ns(self) -> int:
        return self.end

    def start_thread_id(self) -> int:
        return self.tid

    def device_type(self) -> DeviceType:
        return self.device


class Profile:
    def __init__(self, events: list[Event]) -> None:
        self.kineto_results = self
        self._events = events

    def events(self) -> list[Event]:
        return self._events


CUDA_LIKE_STEP = [
    Event("HARNESS::phase forward 0 0", 0, 100, LOOP),
    Event("FSDP::pre_forward (layers.0)", 10, 30, LOOP),
    Event("FSDP::all_gather (layers.0)", 12, 28, LOOP),
    Event("HARNESS::phase backward 0 0", 100, 300, LOOP),
    Event("FSDP::pre_backward (layers.0)", 110, 150, DEVICE),
    Event("FSDP::all_gather (layers.0)", 120, 140, DEVICE),
    Event("FSDP::post_backward_reduce (layers.0)", 200, 250, DEVICE),
    Event("HARNESS::reshard layers.0", 260, 260, DEVICE),
    Event("HARNESS::phase optimizer 0 0", 300, 400, LOOP),
    Event("FSDP::post_backward_reshard (layers.0)", 450, 460, DEVICE),  # after every span
]


def test_backward_events_on_the_device_thread_land_in_backward():
    events = events_from_profiler(Profile(CUDA_LIKE_STEP))
    assert [(e["event"], e["phase"]) for e in events] == [
        ("pre_forward", "forward"),
        ("all_gather", "forward"),
        ("pre_backward", "backward"),
        ("all_gather", "backward"),
        ("post_backward_reduce", "backward"),
        ("reshard", "backward"),
        ("post_backward_reshard", "other"),
    ]
    assert all(e["step_index"] == 0 and e["microbatch"] == 0 for e in events if e["phase"] != "other")


def test_a_data_label_still_takes_the_state_of_the_hook_on_its_own_thread():
    """The hook around an all-gather is nested on one thread; a label of another thread at the same
    time is not its hook."""
    events = events_from_profiler(Profile([*CUDA_LIKE_STEP, Event("FSDP::post_backward_reduce", 115, 145, LOOP)]))
    gathers = [e for e in events if e["event"] == "all_gather"]
    assert [(g["phase"], g["training_state"]) for g in gathers] == [
        ("forward", "FORWARD"),
        ("backward", "PRE_BACKWARD"),
    ]


def test_the_devices_copies_of_the_ranges_are_not_events_twice():
    """A ``--trace`` of a CUDA rank records the device's activity too: Kineto then adds a GPU-side
    copy (``gpu_user_annotation``, same name, on the stream) of every ``record_function`` range.
    No GPU here to make one; these stand-ins are the only way to show it."""
    ranges = [
        Event("HARNESS::phase forward 0 0", 0, 100, LOOP),
        Event("FSDP::pre_forward (layers.0)", 10, 40, LOOP),
        Event("FSDP::all_gather (layers.0)", 12, 30, LOOP),
    ]
    copies = [Event(e.label, e.start + 5, e.end + 5, 0, DeviceType.CUDA) for e in ranges]
    prof = Profile(ranges + copies)
    assert [sp.name for sp in profiler_spans(prof)] == ["FSDP::pre_forward (layers.0)", "FSDP::all_gather (layers.0)"]
    assert [(e["event"], e["unit"], e["phase"]) for e in events_from_profiler(prof)] == [
        ("pre_forward", "layers.0", "forward"),
        ("all_gather", "layers.0", "forward"),
    ]
