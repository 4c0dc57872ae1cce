"""Background remover wrapper: ``BiRefNet(model_name)`` holds the network in ``.model``;
calling it with an RGB PIL image returns the image with an alpha mask (as the real one)."""
import numpy as np
import torch
from PIL import Image
from standin_hf import AutoModelForImageSegmentation


class BiRefNet:
    def __init__(self, model_name: str = "ZhengPeng7/BiRefNet"):
        self.model = AutoModelForImageSegmentation.from_pretrained(model_name,
                                                                   trust_remote_code=True)
        self.model.eval()

    @property
    def device(self):
        return next(self.model.parameters()).device

    def to(self, device):
        self.model.to(device)
        return self

    def cpu(self):
        self.model.cpu()
        return self

    def transform_image(self, image: Image.Image) -> torch.Tensor:
        array = np.asarray(image.resize((256, 256), Image.Resampling.BILINEAR),
                           dtype=np.float32) / 255
        return torch.from_numpy(array).permute(2, 0, 1)

    def __call__(self, image: Image.Image) -> Image.Image:
        size = image.size
        x = self.transform_image(image).unsqueeze(0).to(self.device)
        with torch.no_grad():
            preds = self.model(x)[-1].sigmoid().cpu()
        mask = Image.fromarray((preds[0, 0].numpy() * 255).astype(np.uint8)).resize(size)
        image.putalpha(mask)
        return image
