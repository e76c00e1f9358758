<?php

require __DIR__ . '/src/Shapes.php';

use function Sample\circle_area;

echo circle_area(2.0);
echo circle_area(3.0);
