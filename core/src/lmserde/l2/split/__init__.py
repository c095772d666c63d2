"""Tier-split placement: K kept in L1, V stored through the serde wrapper (V-only serdes)."""
