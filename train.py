"""`python train.py [OVERRIDES]` in a checkout: a thin alias of `jzk train`
(jeanzay_kit/train_app.py). See docs/your-project.md and docs/parallelism.md."""

from jeanzay_kit.train_app import run_app

if __name__ == "__main__":
    run_app(prog="train.py")
