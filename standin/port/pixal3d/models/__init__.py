"""Stand-in of ``pixal3d.models``: lazily imported model classes and ``from_pretrained``.

``from_pretrained(path)`` mirrors the real one: a local checkpoint is the pair
``{path}.json`` (``{"name": class name, "args": constructor kwargs}``) and
``{path}.safetensors``; otherwise ``path`` is ``ORG/REPO/sub/path`` in the Hugging Face cache.
The class is built with its random initialisation (on the default generator), then the
weights are read with ``safetensors.torch.load_file`` (to the CPU) and loaded into it.
"""
import importlib

__attributes = {
    'SparseStructureDecoder': 'sparse_structure_vae',
    'SparseStructureFlowModel': 'sparse_structure_flow',
    'SLatFlowModel': 'structured_latent_flow',
    'ElasticSLatFlowModel': 'structured_latent_flow',
    'SparseUnetVaeDecoder': 'sc_vaes.sparse_unet_vae',
    'FlexiDualGridVaeDecoder': 'sc_vaes.fdg_vae',
}

__all__ = list(__attributes.keys())


def __getattr__(name):
    if name not in globals():
        if name in __attributes:
            module = importlib.import_module(f".{__attributes[name]}", __name__)
            globals()[name] = getattr(module, name)
        else:
            raise AttributeError(f"module {__name__} has no attribute {name}")
    return globals()[name]


def from_pretrained(path: str, **kwargs):
    """Build the model described by ``{path}.json`` and load ``{path}.safetensors`` into it."""
    import json
    import os

    from safetensors.torch import load_file
    is_local = os.path.exists(f"{path}.json") and os.path.exists(f"{path}.safetensors")
    if is_local:
        config_file = f"{path}.json"
        model_file = f"{path}.safetensors"
    else:
        from huggingface_hub import hf_hub_download
        parts = path.split('/')
        repo_id = f'{parts[0]}/{parts[1]}'
        name = '/'.join(parts[2:])
        config_file = hf_hub_download(repo_id, f"{name}.json")
        model_file = hf_hub_download(repo_id, f"{name}.safetensors")
    with open(config_file, 'r') as f:
        config = json.load(f)
    model = __getattr__(config['name'])(**config['args'], **kwargs)
    model.load_state_dict(load_file(model_file), strict=False)
    return model
