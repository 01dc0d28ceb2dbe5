"""Rule catalogue loading and evaluation (placeholder; the rules helper owns this file)."""
