"""Blocking work of the HTTP handlers (the synchronous coordinator, the search client)
runs on the event loop's default executor: a plain thread pool, sized by the app's
lifespan to the requests it admits.

Not FastAPI's own ``def`` handlers: FastAPI hands each of them to a thread through
anyio (a capacity limiter, a cancel scope, a copied context, several wake-ups of the
loop), which measured 0.30 ms of CPU per request on this project's machines against
0.07 ms for ``loop.run_in_executor``, on a route that does nothing else; our whole
stat request costs about 1 ms. The handlers stay synchronous code: ``blocking`` turns
one into a coroutine function with the same signature, which is what FastAPI reads.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


async def in_thread(fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    """``fn(*args, **kwargs)`` on the loop's executor, in a copy of the caller's context
    (as anyio runs it)."""
    call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
    return await asyncio.get_running_loop().run_in_executor(None, call)


def blocking(fn: Callable[P, R]) -> Callable[P, Awaitable[R]]:
    """``fn`` as a coroutine function that runs it ``in_thread``; same name, docs and
    signature, its annotations evaluated (they may be strings of ``fn``'s module)."""

    @functools.wraps(fn)
    async def run(*args: P.args, **kwargs: P.kwargs) -> R:
        return await in_thread(fn, *args, **kwargs)

    run.__signature__ = inspect.signature(fn, eval_str=True)  # type: ignore[attr-defined]
    return run


def use_executor(max_workers: int) -> None:
    """Give the running loop a default executor of ``max_workers`` threads (started as
    needed); the loop shuts it down when it closes."""
    asyncio.get_running_loop().set_default_executor(
        ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="pathkeeper-http")
    )
