# expect: Model(k=3) Ridge(k=5)
class Model:
    def __init__(self, k):
        self.k = k

    def __repr__(self):
        return f"{self.__class__.__name__}(k={self.k})"


class Ridge(Model):
    pass


print(Model(3), Ridge(5))
