"""Tenant routing: an adapter that chooses where an object goes by its key's tenant.

Some adapters place a tenant's objects apart by the key's ``cache_salt`` (``s3``'s
``tenant_routes``: a bucket or prefix per tenant, for bucket policies, residency or deleting a
tenant with its bucket). Under hidden names (``hide_names``) the adapter sees hidden keys only,
whose tenant is always ``""``: every object would silently land in the default place. Such an
adapter offers :meth:`TenantRoutingAdapter.routes_tenants`, and the serde wrapper refuses
``hide_names`` over it when it answers true, rather than break the routing it was configured
with.
"""

from __future__ import annotations

from typing import Any, Protocol

from lmserde.l2.contract.inner_delegation import probe_adapter

__all__ = ["TenantRoutingAdapter", "adapter_routes_tenants"]


class TenantRoutingAdapter(Protocol):
    """An adapter whose placement of an object depends on its key's ``cache_salt``."""

    def routes_tenants(self) -> bool:
        """Whether this instance places some tenants' objects apart from the others (a
        per-tenant location configured), so that it needs each key's real tenant."""
        ...


def adapter_routes_tenants(adapter: Any) -> bool:
    """Whether ``adapter`` routes objects by tenant (adapters without the probe do not; a probe
    that raises is contained and counts as "no", see :func:`probe_adapter`)."""
    return probe_adapter(adapter, "routes_tenants")
