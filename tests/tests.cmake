# One line per module test. TORCH: needs LibTorch (skipped in the tsan build).
# LABELS slow: excluded from the sanitizer test presets.
