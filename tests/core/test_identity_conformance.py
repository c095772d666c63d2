"""Core's own ``identity`` serde passes the conformance kit, through its entry point."""

from lmserde.testing import SerdeConformance


class TestIdentityConformance(SerdeConformance):
    serde_type = "identity"
    detects_corruption = False
