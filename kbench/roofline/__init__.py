"""What a figure is held against: the measured peaks of this host (peaks) and GPU (peaks_gpu),
the datasheets' (datasheet), and the ceiling a call's dtypes and arguments pick (ceilings)."""
