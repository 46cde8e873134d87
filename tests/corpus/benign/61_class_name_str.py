# expect: <Measurement 3.5 kg>
from dataclasses import dataclass


@dataclass
class Measurement:
    value: float
    unit: str

    def __str__(self):
        return f"<{self.__class__.__name__} {self.value:g} {self.unit}>"


print(str(Measurement(3.5, "kg")))
