"""Doctor: run the baseline, profile its phases, measure run-to-run noise (the run's noise record)."""

from .baseline import DoctorError, DoctorResult, DoctorStop, load_noise, run_doctor
from .noise import NoiseProfile, bootstrap_median_ci, cv, mde, noise_warning, repeats_for

__all__ = ["DoctorError", "DoctorResult", "DoctorStop", "NoiseProfile", "bootstrap_median_ci", "cv", "load_noise",
           "mde", "noise_warning", "repeats_for", "run_doctor"]
