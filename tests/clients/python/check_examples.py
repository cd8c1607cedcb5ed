"""Every example request validates against the Python types generated from /openapi.json
(datamodel-code-generator's pydantic models, one per model id), and a copy of each with a wrong `model`
is refused, so the check can fail. Usage: python check_examples.py API_PY EXAMPLES_DIR"""

import importlib.util
import json
import pathlib
import re
import sys

import pydantic


def load(path):
    spec = importlib.util.spec_from_file_location("api", path)
    module = importlib.util.module_from_spec(spec)
    # pydantic looks generic models' modules up by name while the module runs.
    sys.modules["api"] = module
    spec.loader.exec_module(module)
    return module


def key(name):
    """A model id and its generated class name agree once only letters and digits are kept."""
    return re.sub(r"[^a-z0-9]", "", name.lower())


def model_classes(api):
    return {
        key(name): cls
        for name, cls in vars(api).items()
        if isinstance(cls, type) and issubclass(cls, pydantic.BaseModel) and cls.__module__ == api.__name__
    }


def main(api_path, examples):
    classes = model_classes(load(api_path))
    files = sorted(pathlib.Path(examples).glob("*.json"))
    for file in files:
        body = json.loads(file.read_text())
        cls = classes.get(key(body["model"]))
        if cls is None:
            sys.exit(f"{file.name}: no generated type for model {body['model']}")
        try:
            cls.model_validate(body)
        except pydantic.ValidationError as e:
            sys.exit(f"{file.name} does not validate against {cls.__name__}:\n{e}")
        try:
            cls.model_validate(dict(body, model="not-this-model"))
        except pydantic.ValidationError:
            pass
        else:
            sys.exit(f"{cls.__name__} took a request for another model: its types check nothing")
    print(f"python: {len(files)} example requests validated")


if __name__ == "__main__":
    main(*sys.argv[1:])
