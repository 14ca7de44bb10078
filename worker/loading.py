"""Loading an application's bindings and plug-ins from ``module:attribute`` (``--bindings``,
``--plugins``).

Modules resolve from the current folder first, then ``sys.path``, as uvicorn and celery do: the
console script's own ``sys.path`` does not hold the folder it runs in.
"""

import importlib
import os
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import cast

from threadwarden.bindings import Binding, BindingRegistry
from threadwarden.errors import InvalidInput
from threadwarden.hosts import HostMaintenance
from threadwarden.publication import PublicationSink
from threadwarden.worker.plugin import default_registry

MAX_SPEC_CHARS = 500


def import_attribute(field: str, spec: str) -> object:
    """The object ``spec`` (``module:attribute``) names; `InvalidInput` naming ``field`` when
    the module is not found, fails to import (the cause is chained and quoted), or lacks the
    attribute."""
    module_name, _, attribute = spec.partition(":")
    names = [*module_name.split("."), attribute]
    if len(spec) > MAX_SPEC_CHARS or not all(name.isidentifier() for name in names):
        raise InvalidInput(field, "module:attribute (dotted Python names)", spec)
    here = os.getcwd()
    if here not in sys.path:
        sys.path.insert(0, here)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        missing = error.name or ""
        if module_name == missing or module_name.startswith(f"{missing}."):
            raise InvalidInput(
                field, f"an importable module: {module_name} not found in {here} or sys.path"
            ) from error
        raise _import_failed(field, module_name, error) from error
    except Exception as error:  # the module's own code failed: show what and why
        raise _import_failed(field, module_name, error) from error
    try:
        return getattr(module, attribute)
    except AttributeError as error:
        raise InvalidInput(
            field, f"an attribute of {module_name}: it has no {attribute!r}"
        ) from error


def _import_failed(field: str, module_name: str, error: Exception) -> InvalidInput:
    return InvalidInput(
        field,
        f"a module that imports: importing {module_name} raised"
        f" {type(error).__name__}: {error} (-v shows the traceback)",
    )


def load_registry(specs: str | Sequence[str] | None) -> BindingRegistry:
    """The built-in bindings plus those named by ``specs`` (each a registry, a binding or a
    list). An agent id given by two specs is refused (`InvalidInput` naming both); a spec may
    replace a built-in one."""
    registry = default_registry()
    named: dict[str, str] = {}
    for spec in [specs] if isinstance(specs, str) else specs or []:
        for binding in _bindings_of(spec):
            if binding.agent_id in named:
                raise InvalidInput(
                    "bindings",
                    f"each agent id once (agent {binding.agent_id} is given by"
                    f" {named[binding.agent_id]} and {spec})",
                )
            named[binding.agent_id] = spec
            if registry.get(binding.agent_id) is not None:
                registry.bindings.pop(binding.agent_id)  # the application may replace a built-in
            registry.register(binding)
    return registry


def _bindings_of(spec: str) -> list[Binding]:
    value = import_attribute("bindings", spec)
    if isinstance(value, BindingRegistry):
        found: Iterable[object] = value.bindings.values()
    elif isinstance(value, Binding):
        found = [value]
    elif isinstance(value, list | tuple):
        found = value
    else:
        raise InvalidInput("bindings", "a BindingRegistry, a Binding or a list of Bindings", spec)
    bindings = []
    for binding in found:
        if not isinstance(binding, Binding):
            raise InvalidInput("bindings", "only Binding objects", binding)
        bindings.append(binding)
    return bindings


def served_agents(registry: BindingRegistry) -> str:
    """``scripted (scripted-v1), support (3f2a…)``: the agents a worker serves, with digests."""
    return ", ".join(
        f"{agent_id} ({registry.bindings[agent_id].digest})" for agent_id in registry.agent_ids()
    )


@dataclass(frozen=True)
class Plugins:
    """What ``--plugins`` attached: publication sinks and at most one host plug-in."""

    sinks: tuple[PublicationSink, ...] = ()
    host: HostMaintenance | None = None


PLUGIN_KINDS = "a publication sink, a host plug-in, or a list of them (instances, not classes)"


def _is_sink(value: object) -> bool:
    return isinstance(getattr(value, "name", None), str) and callable(
        getattr(value, "publish", None)
    )


def _is_host(value: object) -> bool:
    return all(callable(getattr(value, name, None)) for name in ("wave", "pending_deadline"))


def load_plugins(specs: Sequence[str] | None) -> Plugins:
    """The sinks and host plug-in named by ``specs`` (each ``module:attribute``: a sink, a host
    plug-in, or a list or tuple of them; see `threadwarden.publication`, `threadwarden.hosts`)."""
    sinks: list[PublicationSink] = []
    hosts: list[HostMaintenance] = []
    for spec in specs or ():
        value = import_attribute("plugins", spec)
        found = list(value) if isinstance(value, list | tuple) else [value]
        if not found:
            raise InvalidInput("plugins", PLUGIN_KINDS, f"{spec} (empty)")
        for plugin in found:
            if isinstance(plugin, type) or not (_is_sink(plugin) or _is_host(plugin)):
                raise InvalidInput("plugins", PLUGIN_KINDS, f"{spec}: {plugin!r}")
            if _is_host(plugin):
                hosts.append(cast(HostMaintenance, plugin))  # its shape was checked above
            if _is_sink(plugin):
                sinks.append(cast(PublicationSink, plugin))
    if len(hosts) > 1:
        raise InvalidInput("plugins", "at most one host plug-in", f"{len(hosts)} host plug-ins")
    return Plugins(tuple(sinks), hosts[0] if hosts else None)
