"""Reports: the Rich console report and file exports."""
