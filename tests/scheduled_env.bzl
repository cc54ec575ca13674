"""What the scheduled-plan suites run with (tests/runtime, tests/gpu): every planner, a plan after
3 profiled steps, and stalls reported within seconds."""

# Every planner the scheduled suites run, host and device alike.
SCHEDULED_PLANNERS = [
    "wfbp",
    "fusion",
    "mgwfbp",
    "bytescheduler",
    "usbyte",
    "dear",
    "deft",
    "auto",
]

SCHEDULED_ENV = {
    "OVERLAP_PROFILE_STEPS": "3",
    "OVERLAP_STALL_WARNING_S": "5",
    "OVERLAP_STALL_TIMEOUT_S": "20",
}
