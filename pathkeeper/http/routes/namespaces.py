"""Listing, creating and dropping namespaces."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from pathkeeper.http import errors as service_errors
from pathkeeper.http.deps import ADMIN, AnyAdmin, AnyReader, CoordDep, NsParam
from pathkeeper.http.schemas import MutationOut, NamespaceIn, NamespacesOut
from pathkeeper.http.threads import blocking

router = APIRouter(prefix="/v1/namespaces", tags=["namespaces"])


@router.get("", response_model=NamespacesOut)
@blocking
def list_namespaces(who: AnyReader, coord: CoordDep) -> NamespacesOut:
    """The namespaces this key may use that exist."""
    return NamespacesOut(namespaces=[n for n in coord.namespaces() if who.covers(n)])


@router.post("", response_model=MutationOut, status_code=201)
@blocking
def create_namespace(body: NamespaceIn, who: AnyAdmin, coord: CoordDep) -> MutationOut:
    """Create a namespace (admin scope). A key not issued for the name gets 403."""
    if not who.covers(body.name):
        raise service_errors.forbidden("this API key is not issued for that namespace")
    return MutationOut.of(coord.create_namespace(body.name))


@router.delete("/{ns}", response_model=MutationOut, dependencies=[Depends(ADMIN)])
@blocking
def drop_namespace(ns: NsParam, coord: CoordDep, force: bool = False) -> MutationOut:
    """Drop a namespace (admin scope); ``force`` drops a non-empty one."""
    return MutationOut.of(coord.drop_namespace(ns, force=force))
