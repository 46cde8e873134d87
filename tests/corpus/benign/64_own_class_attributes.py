# expect: sgd lr=0.05 compiled=True ir=3 preview=off Trainer
class Trainer:
    def __init__(self, lr):
        self.optimizer = "sgd"
        self.compiler = {"jit": True}
        self.ir = [1, 2, 3]
        self.preview = False
        self.lr = lr

    def summary(self):
        state = "on" if self.preview else "off"
        return (f"{self.optimizer} lr={self.lr} compiled={self.compiler['jit']} "
                f"ir={len(self.ir)} preview={state} {self.__class__.__name__}")


print(Trainer(0.05).summary())
