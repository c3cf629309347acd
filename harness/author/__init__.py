"""Author: tools that write specs (the closed-form calculator and draft); nothing on the check path imports them."""
