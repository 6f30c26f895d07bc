#!/bin/bash
sed -i -e 's/^port = 8080$/port = 9090/' -e 's/^log_level = info$/log_level = debug/' app.conf
