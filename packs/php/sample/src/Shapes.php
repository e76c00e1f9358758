<?php

namespace Sample;

function circle_area(float $r): float
{
    return 3.14159 * $r * $r;
}
