"""What a trial yields: timing statistics (``measure``), the noise context of a measurement (``noise``) and the
facts derived from its samples (``facts``)."""
