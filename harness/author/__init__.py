"""Author: tools that write specs (``draft``, from the closed-form tables of
:mod:`harness.calculator`); nothing on the check path imports them."""
