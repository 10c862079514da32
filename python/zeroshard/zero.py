"""DeepSpeed's deepspeed.zero names that zeroshard has: a script written
for DeepSpeed finds them as zeroshard.zero.GatheredParameters."""
from .gathered import GatheredParameters

__all__ = ["GatheredParameters"]
