"""What a trial yields: timing statistics (``measure``), the noise context of a measurement (``noise``) and the
facts derived from its samples (``facts``)."""

from enum import StrEnum


class TrialStatus(StrEnum):
    """How a trial ended: ``ok`` (built, ran, within the tolerance), else why it is not a candidate."""

    OK = "ok"
    CRASHED = "crashed"
    TIMEOUT = "timeout"
    BUILD_ERROR = "build-error"
    ACCURACY_FAILED = "accuracy-failed"
