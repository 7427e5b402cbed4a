#!/usr/bin/env python3
"""Checks prism-mock's /v4.0/ answers against the models of Nutanix's official Python SDKs for v4.0
(ntnx-vmm-py-client and ntnx-prism-py-client 4.0.x), strictly.

The SDKs themselves are lenient when they read an answer: a field their model does not know goes into
`_unknown_fields`, and constraints (such as `min=1 chars`) are checked only by the property setters, which
the deserializer bypasses. This script walks each answer against the model instead and reports:

- a field the model does not have (a later revision's field at a /v4.0/ path);
- a value the model's setter refuses (a length or range constraint), and a value of the wrong JSON type;
- an enum value the model does not list;
- an `$objectType` that is not the model's (or, for a oneOf, that names no model);
- a `$reserved` that is not `{"$fv": <the model's version>}`, and a response `data` object without one
  (the SDK models' `_initialize_object_version()`, `v4.r0` for v4.0, is what their `$reserved` carries).

Usage: check_v4.py ANSWERS.json, where ANSWERS.json is a list of {"label": ..., "body": ...}; each body's
top-level `$objectType` names its model. Prints one line per problem; exits 1 if there is any, 2 if the
installed SDKs are not the v4.0 ones, 0 otherwise.
"""

import importlib
import json
import re
import sys

PACKAGES = {"vmm": "ntnx_vmm_py_client", "prism": "ntnx_prism_py_client"}
V4_0 = "v4.r0"
# Keys every model has besides its own fields (attribute_map's `$reserved`, `$objectType`, `$unknownFields`).
META_KEYS = {"$reserved", "$objectType", "$unknownFields"}


def model_class(type_name, preferred):
    """The SDK class for `vmm.v4.content.Template`-style names, looked up in the preferred package first."""
    order = [preferred] + [p for p in PACKAGES.values() if p != preferred]
    for package in order:
        try:
            module = importlib.import_module(f"{package}.models.{type_name}")
        except ImportError:
            continue
        cls = getattr(module, type_name.rsplit(".", 1)[-1], None)
        if cls is not None:
            return cls
    return None


def enum_values(cls):
    return {
        value
        for key, value in vars(cls).items()
        if isinstance(value, str) and not key.startswith("__") and key.upper() == key
    }


class Checker:
    def __init__(self, label, package):
        self.label = label
        self.package = package
        self.problems = []

    def problem(self, path, message):
        self.problems.append(f"{self.label}: {path or '<root>'}: {message}")

    def value(self, value, type_name, path):
        """Checks `value` against a swagger type string; returns what the setter should receive."""
        if value is None:
            return None
        match = re.fullmatch(r"list\[(.*)\]", type_name)
        if match:
            if not isinstance(value, list):
                self.problem(path, f"expected a list, got {type(value).__name__}")
                return None
            return [self.value(item, match.group(1), f"{path}[{i}]") for i, item in enumerate(value)]
        match = re.fullmatch(r"dict\(([^,]*), (.*)\)", type_name)
        if match:
            if not isinstance(value, dict):
                self.problem(path, f"expected an object, got {type(value).__name__}")
                return None
            return value
        if type_name == "object":
            return value
        primitive = {"str": str, "int": int, "float": (int, float), "bool": bool, "datetime": str, "date": str}
        if type_name in primitive:
            wrong = not isinstance(value, primitive[type_name]) or (
                type_name in ("int", "float") and isinstance(value, bool)
            )
            if wrong:
                self.problem(path, f"expected {type_name}, got {type(value).__name__} {value!r}")
                return None
            if type_name in ("datetime", "date"):
                try:
                    from dateutil.parser import isoparse

                    isoparse(value)
                except (ValueError, ImportError) as error:
                    self.problem(path, f"not an ISO 8601 {type_name}: {value!r} ({error})")
            return value
        if type_name.startswith("OneOf"):
            return self.one_of(value, path)
        cls = model_class(type_name, self.package)
        if cls is None:
            self.problem(path, f"the SDK has no model {type_name}")
            return None
        return self.model(value, cls, type_name, path)

    def one_of(self, value, path):
        if isinstance(value, list):
            return [self.one_of(item, f"{path}[{i}]") for i, item in enumerate(value)]
        if isinstance(value, dict):
            object_type = value.get("$objectType")
            if not isinstance(object_type, str):
                self.problem(path, "a oneOf object without $objectType")
                return None
            return self.value(value, object_type, path)
        return value

    def model(self, value, cls, type_name, path):
        if not hasattr(cls, "swagger_types"):
            if value not in enum_values(cls):
                self.problem(path, f"{value!r} is not a value of enum {type_name}")
            return value
        if not isinstance(value, dict):
            self.problem(path, f"expected a {type_name} object, got {type(value).__name__}")
            return None
        instance = cls()
        expected_type = instance._initialize_object_type()
        object_type = value.get("$objectType")
        if object_type is not None and object_type != expected_type:
            self.problem(path, f"$objectType {object_type!r} where the model is {expected_type!r}")
        if "$reserved" in value:
            wanted = {"$fv": instance._initialize_object_version()}
            if value["$reserved"] != wanted:
                self.problem(path, f"$reserved {value['$reserved']!r} where the model's is {wanted!r}")
        known = {json_key: attr for attr, json_key in cls.attribute_map.items()}
        for key, field in value.items():
            if key in META_KEYS:
                continue
            attr = known.get(key)
            if attr is None:
                self.problem(f"{path}.{key}", f"not a field of {type_name} (v4.0)")
                continue
            checked = self.value(field, cls.swagger_types[attr], f"{path}.{key}")
            if checked is None:
                continue
            try:
                setattr(instance, attr, checked)
            except (ValueError, TypeError) as error:
                self.problem(f"{path}.{key}", f"refused by the model: {error}")
        return instance


def check(label, body):
    object_type = body.get("$objectType") if isinstance(body, dict) else None
    if not isinstance(object_type, str):
        return [f"{label}: <root>: no $objectType to pick the model by"]
    namespace = object_type.split(".", 1)[0]
    package = PACKAGES.get(namespace)
    if package is None:
        return [f"{label}: <root>: no SDK for {object_type}"]
    checker = Checker(label, package)
    cls = model_class(object_type, package)
    if cls is None:
        return [f"{label}: <root>: the SDK has no model {object_type}"]
    checker.model(body, cls, object_type, "")
    data = body.get("data")
    items = data if isinstance(data, list) else [data]
    for i, item in enumerate(items):
        if isinstance(item, dict) and "$reserved" not in item:
            where = "data" if not isinstance(data, list) else f"data[{i}]"
            checker.problem(where, "no $reserved (every v4.0 model carries one)")
    return checker.problems


def main():
    if len(sys.argv) != 2:
        print("usage: check_v4.py ANSWERS.json", file=sys.stderr)
        return 2
    for namespace, package in PACKAGES.items():
        probe = "vmm.v4.content.Template" if namespace == "vmm" else "prism.v4.config.Task"
        cls = model_class(probe, package)
        version = cls()._initialize_object_version() if cls is not None else None
        if version != V4_0:
            print(f"{package}: its {probe} model is {version}, not {V4_0}: install the 4.0 SDKs")
            return 2
    with open(sys.argv[1], encoding="utf-8") as answers_file:
        answers = json.load(answers_file)
    problems = []
    for answer in answers:
        problems.extend(check(answer["label"], answer["body"]))
    for line in problems:
        print(line)
    print(f"{len(answers)} answers checked, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
