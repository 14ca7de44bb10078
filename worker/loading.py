"""Loading an application's bindings from ``module:attribute``."""

import importlib
from collections.abc import Iterable

from threadwarden.bindings import Binding, BindingRegistry
from threadwarden.errors import InvalidInput
from worker.runtime import default_registry

MAX_SPEC_CHARS = 500


def load_registry(spec: str | None) -> BindingRegistry:
    """The built-in bindings plus those named by ``spec`` (a registry, a binding or a list)."""
    registry = default_registry()
    if spec is None:
        return registry
    module_name, _, attribute = spec.partition(":")
    names = [*module_name.split("."), attribute]
    if len(spec) > MAX_SPEC_CHARS or not all(name.isidentifier() for name in names):
        raise InvalidInput("bindings", "module:attribute (dotted Python names)", spec)
    try:
        value = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as error:
        raise InvalidInput("bindings", "an importable module:attribute", spec) from error
    if isinstance(value, BindingRegistry):
        found: Iterable[object] = value.bindings.values()
    elif isinstance(value, Binding):
        found = [value]
    elif isinstance(value, list | tuple):
        found = value
    else:
        raise InvalidInput("bindings", "a BindingRegistry, a Binding or a list of Bindings", spec)
    for binding in found:
        if not isinstance(binding, Binding):
            raise InvalidInput("bindings", "only Binding objects", binding)
        if registry.get(binding.agent_id) is not None:
            registry.bindings.pop(binding.agent_id)  # the application may replace a built-in
        registry.register(binding)
    return registry
